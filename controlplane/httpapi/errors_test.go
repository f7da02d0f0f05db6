package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/controlplane/rollout"
	"github.com/baton-kafka/baton/migration"
)

// failing answers every Status with err; its other methods are not called.
type failing struct {
	API
	err error
}

func (f failing) Status(string) (controlplane.TopicStatus, error) {
	return controlplane.TopicStatus{}, f.err
}

// Every sentinel the server answers survives the wire: the client's error
// is errors.Is the sentinel the server's error wrapped, and of no other,
// with the status the sentinel is answered with and its stable code.
func TestSentinelsSurviveTheWire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err    error
		code   string
		status int
	}{
		{rollout.ErrWaveRefused, "wave_refused", http.StatusConflict},
		{controlplane.ErrUnknownTopic, "unknown_topic", http.StatusNotFound},
		{controlplane.ErrIllegalTransition, "illegal_transition", http.StatusConflict},
		{controlplane.ErrCutoverRunning, "cutover_running", http.StatusConflict},
		{controlplane.ErrGateRefused, "gate_refused", http.StatusConflict},
		{controlplane.ErrTopicExists, "topic_exists", http.StatusConflict},
		{controlplane.ErrNeedsForce, "needs_force", http.StatusConflict},
		{controlplane.ErrBadConfig, "bad_config", http.StatusBadRequest},
		{replication.ErrBadConfig, "replication_bad_config", http.StatusBadRequest},
		{controlplane.ErrClosed, "closed", http.StatusInternalServerError},
		{controlplane.ErrStoreUnavailable, "store_unavailable", http.StatusInternalServerError},
		{controlplane.ErrNotLeader, "not_leader", http.StatusInternalServerError},
		{controlplane.ErrVersionMoved, "version_moved", http.StatusInternalServerError},
		{controlplane.ErrDecided, "decided", http.StatusInternalServerError},
		{replication.ErrNotReady, "not_ready", http.StatusInternalServerError},
		{acl.ErrGuardPrincipal, "guard_principal", http.StatusInternalServerError},
		{acl.ErrGuard, "guard", http.StatusInternalServerError},
		{controlplane.ErrNoSourceFence, "no_source_fence", http.StatusInternalServerError},
		{acl.ErrFence, "source_fence", http.StatusInternalServerError},
		{controlplane.ErrTransactions, "transactions", http.StatusInternalServerError},
		{controlplane.ErrDataDirLocked, "data_dir_locked", http.StatusInternalServerError},
	}
	if len(tests) != len(sentinels) {
		t.Fatalf("%d sentinels answered, %d tested: test every one", len(sentinels), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(New(failing{err: fmt.Errorf("topic t: %w", tt.err)}))
			t.Cleanup(srv.Close)
			_, err := (&Client{Base: srv.URL}).Status(context.Background(), "t")
			var ae *Error
			if !errors.As(err, &ae) || ae.Status != tt.status || !slices.Equal(ae.Codes, []string{tt.code}) {
				t.Fatalf("%v (%+v), want status %d with code %s", err, ae, tt.status, tt.code)
			}
			if !errors.Is(err, tt.err) || err.Error() != "topic t: "+tt.err.Error() {
				t.Fatalf("%v is not %v, or lost its message", err, tt.err)
			}
			for _, other := range tests {
				if other.err != tt.err && errors.Is(err, other.err) {
					t.Errorf("%v is also %v", err, other.err)
				}
			}
		})
	}
}

// An error wrapping two sentinels keeps both, answered with the status of
// the first in the order of sentinels; one wrapping none is a 500 that is
// no sentinel; an answer that is not the API's is told by its status.
func TestErrorsOfManyOrNoSentinels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		status int
		is     []error
	}{
		{"two", fmt.Errorf("%w: %w", controlplane.ErrGateRefused, replication.ErrNotReady), http.StatusConflict,
			[]error{controlplane.ErrGateRefused, replication.ErrNotReady}},
		{"none", errors.New("disk full"), http.StatusInternalServerError, nil},
	}
	for _, tt := range tests {
		srv := httptest.NewServer(New(failing{err: tt.err}))
		_, err := (&Client{Base: srv.URL}).Status(context.Background(), "t")
		srv.Close()
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != tt.status || len(ae.Unwrap()) != len(tt.is) {
			t.Errorf("%s: %v (%+v), want status %d and %d sentinels", tt.name, err, ae, tt.status, len(tt.is))
		}
		for _, s := range tt.is {
			if !errors.Is(err, s) {
				t.Errorf("%s: %v is not %v", tt.name, err, s)
			}
		}
	}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream gone", http.StatusBadGateway)
	}))
	defer proxy.Close()
	_, err := (&Client{Base: proxy.URL}).Topics(context.Background())
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadGateway || ae.Message != "502 Bad Gateway: upstream gone" || len(ae.Unwrap()) != 0 {
		t.Errorf("a proxy's answer: %v (%+v)", err, ae)
	}
}

// A real control plane's refusals reach the client as its sentinels.
func TestControlPlaneRefusalsOverHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := httptest.NewServer(New(newControlPlane(t, idleReplication{})))
	t.Cleanup(srv.Close)
	cl := &Client{Base: srv.URL}
	if _, err := cl.Add(ctx, controlplane.TopicSpec{Name: "t"}, "test"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"status of an unknown topic", func() error { _, err := cl.Status(ctx, "nope"); return err }, controlplane.ErrUnknownTopic},
		{"add twice", func() error { _, err := cl.Add(ctx, controlplane.TopicSpec{Name: "t"}, "test"); return err }, controlplane.ErrTopicExists},
		{"a state that is none", func() error { _, err := cl.Op(ctx, "t", "state", "test", "", "SIDEWAYS"); return err }, controlplane.ErrBadConfig},
		{"a removal's force that is no bool", func() error {
			req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/topics/t?force=maybe", nil)
			resp, err := cl.send(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			return readError(resp)
		}, controlplane.ErrBadConfig},
		{"migrate with the lag unknown", func() error { _, err := cl.Migrate(ctx, "t", "test", nil); return err }, controlplane.ErrGateRefused},
		{"COMPLETE by hand", func() error { _, err := cl.SetState(ctx, "t", migration.Complete, "test"); return err }, controlplane.ErrIllegalTransition},
	}
	for _, tt := range tests {
		if err := tt.call(); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}
