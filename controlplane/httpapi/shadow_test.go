package httpapi

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/baton-kafka/baton/controlplane"
)

// The API switches latency emulation on an existing topic (what `baton
// topic shadow T --latency-emulation=on|off` sends), and refuses an unknown
// topic.
func TestShadowOverHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cp := newControlPlane(t, idleReplication{})
	if _, err := cp.AddTopic(ctx, controlplane.TopicSpec{Name: "t"}, "test"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(cp))
	t.Cleanup(srv.Close)
	cl := &Client{Base: srv.URL}
	for _, on := range []bool{true, false} {
		got, err := cl.Shadow(ctx, "t", controlplane.ShadowChange{LatencyEmulation: &on}, "op")
		if err != nil || got.Shadow.LatencyEmulation != on {
			t.Fatalf("switching latency emulation to %v: %+v, %v", on, got.Shadow, err)
		}
	}
	for _, on := range []bool{true, false} {
		got, err := cl.Shadow(ctx, "t", controlplane.ShadowChange{AuthCheck: &on, AuthEnforce: &on}, "op")
		if err != nil || got.Shadow.AuthCheck != on || got.Shadow.AuthEnforce != on {
			t.Fatalf("switching the auth check and enforce to %v: %+v, %v", on, got.Shadow, err)
		}
	}
	on := true
	var apiErr *Error
	if _, err := cl.Shadow(ctx, "nope", controlplane.ShadowChange{LatencyEmulation: &on}, "op"); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Fatalf("an unknown topic: %v, want 404", err)
	}
}
