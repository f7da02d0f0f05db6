// Command baton is Baton's one binary: the agent, the control plane, the
// replicator, the demo and the operator CLI. main only wires commands; each
// command's work lives in its package.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "baton:", err)
		os.Exit(exitCode(err))
	}
}
