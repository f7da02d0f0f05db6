// Package dirlock owns the lock that keeps a directory to one process: an
// exclusive flock on a file in it, holding the process's pid. The kernel
// drops the lock when the process dies, so a crashed process leaves
// nothing to clean up, and a second one on the same directory is refused
// at once, naming the first.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked: another process holds the directory. Every message starts
// with "dirlock: ".
var ErrLocked = errors.New("dirlock: directory in use")

// Lock creates dir if missing and takes an exclusive flock on dir/name,
// writing this process's pid into it. Closing the file releases the lock.
// A lock another process holds is refused with ErrLocked, naming its pid.
func Lock(dir, name string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dirlock: %w", err)
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dirlock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			holder = "pid " + strings.TrimSpace(string(b))
		}
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is in use by %s (it holds %s)", ErrLocked, dir, holder, path)
		}
		return nil, fmt.Errorf("dirlock: locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
