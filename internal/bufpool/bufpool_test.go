package bufpool

import (
	"fmt"
	"testing"
)

func TestGetPut(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 511, 512, 513, 1 << 10, 64 << 10, 1<<maxClass + 1} {
		b := Get(n)
		if len(b) != n {
			t.Fatalf("Get(%d): len %d", n, len(b))
		}
		if n > 0 && n <= 1<<maxClass && (cap(b) < n || cap(b)&(cap(b)-1) != 0) {
			t.Fatalf("Get(%d): cap %d, want a power of two at least n", n, cap(b))
		}
		for i := range b {
			b[i] = byte(i)
		}
		Put(b)
		again := Get(n)
		if len(again) != n {
			t.Fatalf("Get(%d) after Put: len %d", n, len(again))
		}
		Put(again)
	}
	Put(make([]byte, 3)) // not a pooled class: dropped
	Put(nil)
}

// BenchmarkGetPut shows that a pooled round trip allocates nothing.
func BenchmarkGetPut(b *testing.B) {
	for _, n := range []int{1 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			b.ReportAllocs()
			Put(Get(n))
			for b.Loop() {
				Put(Get(n))
			}
		})
	}
}
