// Package testlog owns the log sink tests read while the code under test
// writes to it from its own goroutines.
// Only tests import it.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for one writer goroutine or more and a
// reader at once: a logger's destination that a test reads while the
// server it watches runs.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
