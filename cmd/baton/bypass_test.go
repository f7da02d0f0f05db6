package main

import (
	"context"
	"strings"
	"testing"
)

// A negative --bypass-watch or --bypass-grace is refused, naming the flag.
func TestBypassFlagsRefuseNegative(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--bypass-watch", "--bypass-grace", "--gate-forgotten-producer-window"} {
		root := newRootCmd()
		root.SetArgs([]string{"controlplane", "--source", "127.0.0.1:1", "--destination", "127.0.0.1:2", flag, "-1h"})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := root.ExecuteContext(ctx); err == nil || !strings.HasPrefix(err.Error(), flag+":") {
			t.Errorf("%s -1h: got %v, want a refusal naming %s", flag, err, flag)
		}
	}
}
