package testlog

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Writers and a reader at once lose no write (and -race sees no race).
func TestBuffer(t *testing.T) {
	t.Parallel()
	var b Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 200 {
		t.Fatalf("%d lines, want 200", n)
	}
}
