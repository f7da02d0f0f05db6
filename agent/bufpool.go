package agent

import (
	"math/bits"
	"sync"
)

// Buffers for request frames and re-encoded produce requests are pooled by
// power-of-two size class: at hundreds of MB/s, allocating and zeroing each
// frame cost more CPU than forwarding it.
const (
	minBufClass = 9  // 512 B
	maxBufClass = 26 // 64 MiB; larger buffers are not pooled
)

var bufPools [maxBufClass + 1]sync.Pool

// getBuf returns a buffer of length n whose contents are undefined.
func getBuf(n int) []byte {
	class := max(bits.Len(uint(n-1)), minBufClass)
	if n <= 0 {
		class = minBufClass
	}
	if class > maxBufClass {
		return make([]byte, n)
	}
	if p, ok := bufPools[class].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<class)
}

// putBuf returns b to its pool. The caller MUST NOT use b afterwards.
func putBuf(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 {
		return // not one of ours
	}
	class := bits.Len(uint(c - 1))
	if class < minBufClass || class > maxBufClass {
		return
	}
	b = b[:0]
	bufPools[class].Put(&b)
}
