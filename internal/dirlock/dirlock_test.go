package dirlock

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A second lock on a held directory is refused naming the holder's pid;
// once the holder closes its file the directory can be locked again.
func TestLockIsExclusive(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "made")
	f, err := Lock(dir, "x.lock")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir, "x.lock")
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second lock: %v, want ErrLocked naming pid %d", err, os.Getpid())
	}
	f.Close()
	g, err := Lock(dir, "x.lock")
	if err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
	g.Close()
}
