package main

import (
	"context"
	"strings"
	"testing"
)

// TestDemoFlagsRefused: a bad flag of `baton demo` is refused naming it,
// before anything starts.
func TestDemoFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--topics", "orders"}, "--topics"},
		{[]string{"--topics", "orders:0"}, "--topics"},
		{[]string{"--topics", "orders:2,orders:3", "--rollback", ""}, "--topics"},
		{[]string{"--topics", "", "--rollback", ""}, "--topics"},
		{[]string{"--topics", "orders:6", "--rollback", "payments"}, "--rollback"},
		{[]string{"--rate", "0"}, "--rate"},
		{[]string{"--phase", "0s"}, "--phase"},
		{[]string{"--cutover-timeout", "-1s"}, "--cutover-timeout"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			root := newRootCmd()
			root.SetArgs(append([]string{"demo"}, tc.args...))
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // nothing may start: a demo that got past the check stops at once
			err := root.ExecuteContext(ctx)
			if err == nil || !strings.HasPrefix(err.Error(), tc.flag+" ") && !strings.HasPrefix(err.Error(), tc.flag+":") {
				t.Fatalf("got %v, want an error naming %s", err, tc.flag)
			}
		})
	}
}
