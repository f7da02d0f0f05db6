package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A control plane that cannot open one of its listeners fails naming the
// flag of its address (replicas.Lifecycle says which listener, the
// command which flag).
func TestControlPlaneNamesTheBusyAddressFlag(t *testing.T) {
	t.Parallel()
	src, dst := kfakePair(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() }) // after the parallel subtests, not when this function returns
	for _, flag := range []string{"grpc", "http", "admin"} {
		t.Run(flag, func(t *testing.T) {
			t.Parallel()
			addrs := map[string]string{"grpc": "127.0.0.1:0", "http": "127.0.0.1:0", "admin": "127.0.0.1:0"}
			addrs[flag] = busy.Addr().String()
			// Bounds a control plane that comes up instead of failing:
			// it would run until stopped, and return nil.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			root := newRootCmd()
			root.SetArgs([]string{"controlplane", "--source", src.Bootstrap(), "--destination", dst.Bootstrap(),
				"--write-guard", "none", "--source-fence", "none", "--data-dir", t.TempDir(), "--log-level", "error",
				"--grpc", addrs["grpc"], "--http", addrs["http"], "--admin", addrs["admin"]})
			err := root.ExecuteContext(ctx)
			if err == nil || !strings.HasPrefix(err.Error(), "--"+flag+": ") || !errors.Is(err, syscall.EADDRINUSE) {
				t.Fatalf("want --%s: ... address already in use, got %v", flag, err)
			}
		})
	}
}
