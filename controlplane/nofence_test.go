package controlplane

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Without a source fence nothing is fenced, checked or lifted: each call
// refuses with ErrNoSourceFence, and the lift (asked for only when a
// rolled-back cutover of a control plane with a fence left it up) says
// what to do instead. The keeper's restore treats that as a failed lift of
// the topic's own (acl.TestFailingFenceLiftBlocksNoOtherGuardRestore).
func TestNoFenceRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, enforcedErr := NoFence{}.Enforced(ctx, "orders")
	for _, tc := range []struct {
		name string
		err  error
		says []string
	}{
		{"fence", NoFence{}.Fence(ctx, "orders"), nil},
		{"enforced", enforcedErr, nil},
		{"lift", NoFence{}.Lift(ctx, "orders"), []string{"orders", "--source-fence=acl", "DENY WRITE ACL for User:*"}},
	} {
		if !errors.Is(tc.err, ErrNoSourceFence) {
			t.Errorf("%s: %v, want ErrNoSourceFence", tc.name, tc.err)
			continue
		}
		for _, w := range tc.says {
			if !strings.Contains(tc.err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, tc.err, w)
			}
		}
	}
}
