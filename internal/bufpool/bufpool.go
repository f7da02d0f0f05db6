// Package bufpool pools the agent's byte buffers (request frames, re-encoded
// produce requests) by power-of-two size class: at hundreds of MB/s,
// allocating and zeroing each frame cost more CPU than forwarding it.
package bufpool

import (
	"math/bits"
	"sync"
	"unsafe"
)

const (
	minClass = 9  // 512 B
	maxClass = 26 // 64 MiB; larger buffers are not pooled
)

// pools[c] holds buffers of capacity 1<<c, each as a pointer to its first
// byte: a pointer converts to an interface without allocating, where a
// slice header (or a new *[]byte per Put) would allocate on every Put. The
// pointer keeps the whole buffer alive.
var pools [maxClass + 1]sync.Pool

// Get returns a buffer of length n whose contents are undefined. Its
// capacity may be larger; Put takes it back.
func Get(n int) []byte {
	class := max(bits.Len(uint(n-1)), minClass)
	if n <= 0 {
		class = minClass
	}
	if class > maxClass {
		return make([]byte, n)
	}
	if p, ok := pools[class].Get().(*byte); ok {
		return unsafe.Slice(p, 1<<class)[:n]
	}
	return make([]byte, n, 1<<class)
}

// Put returns b to its pool; a buffer whose capacity is not a pooled size
// class is dropped. The caller MUST NOT use b, or any slice of its array,
// afterwards.
func Put(b []byte) {
	c := cap(b)
	if c == 0 || c&(c-1) != 0 {
		return // not one of ours
	}
	class := bits.Len(uint(c - 1))
	if class < minClass || class > maxClass {
		return
	}
	pools[class].Put(&b[:1][0])
}
