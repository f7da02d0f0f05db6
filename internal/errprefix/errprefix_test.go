package errprefix_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/baton-kafka/baton/internal/errprefix"
)

func TestNested(t *testing.T) {
	t.Parallel()
	errA := errors.New("pkg: a failed")
	errB := errors.New("pkg: b failed")
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"same prefix is dropped", fmt.Errorf("%w: %w", errB, errprefix.Nested("pkg: ", errA)), "pkg: b failed: a failed"},
		{"other prefix is kept", fmt.Errorf("%w: %w", errB, errprefix.Nested("other: ", errA)), "pkg: b failed: pkg: a failed"},
		{"only a leading prefix", errprefix.Nested("pkg: ", errors.New("x pkg: y")), "x pkg: y"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := c.err.Error(); got != c.want {
				t.Errorf("Error() = %q, want %q", got, c.want)
			}
		})
	}
	wrapped := fmt.Errorf("%w: %w", errB, errprefix.Nested("pkg: ", errA))
	if !errors.Is(wrapped, errA) || !errors.Is(wrapped, errB) {
		t.Errorf("errors.Is does not see through Nested: %v", wrapped)
	}
	if errprefix.Nested("pkg: ", nil) != nil {
		t.Error("Nested(prefix, nil) != nil")
	}
}
