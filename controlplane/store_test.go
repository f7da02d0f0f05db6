package controlplane

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A second embedded etcd on a data directory in use fails at once, naming
// the holder, instead of waiting on etcd's database lock forever; the
// directory is free again once the first store closes.
func TestEmbeddedDataDirLocked(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	first, err := OpenEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	type result struct {
		s   *EtcdStore
		err error
	}
	done := make(chan result, 1)
	go func() { s, err := OpenEmbedded(ctx, dir); done <- result{s, err} }()
	var got result
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a second OpenEmbedded on a used data directory still waits after 30s")
	}
	if got.err == nil {
		_ = got.s.Close()
		t.Fatal("a second OpenEmbedded on a used data directory succeeded")
	}
	if !errors.Is(got.err, ErrDataDirLocked) || !strings.Contains(got.err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("got %v, want ErrDataDirLocked naming pid %d", got.err, os.Getpid())
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := OpenEmbedded(ctx, dir)
	if err != nil {
		t.Fatalf("after the first store closed: %v", err)
	}
	_ = again.Close()
}
