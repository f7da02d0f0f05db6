package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/replicator"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// idleReplication copies nothing, and measures no lag.
type idleReplication struct{}

func (idleReplication) Start(string) error { return nil }
func (idleReplication) Stop(context.Context, string) (map[int32]int64, []replicator.SourceBatch, error) {
	return map[int32]int64{}, nil, nil
}
func (idleReplication) SetMigrating(string, bool) error { return nil }
func (idleReplication) Lag(string) (time.Duration, error) {
	return 0, replication.ErrNotReady
}
func (idleReplication) Progress(string) (map[int32]int64, error) {
	return nil, replication.ErrNotReady
}
func (idleReplication) SourceEndOffsets(context.Context, string) (map[int32]int64, error) {
	return nil, replication.ErrNotReady
}

func (idleReplication) Diverged(string) map[int32]string { return nil }

// caughtUp is a replication whose every topic is caught up, so that the
// cutover gate opens at once.
type caughtUp struct{ idleReplication }

func (caughtUp) Lag(string) (time.Duration, error) { return 0, nil }

func tokenSum(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// newControlPlane is a control plane on a MemStore replicating with repl,
// closed when the test ends.
func newControlPlane(t *testing.T, repl controlplane.Replication, opts ...controlplane.Opt) *controlplane.ControlPlane {
	t.Helper()
	cp, err := controlplane.New(context.Background(), append([]controlplane.Opt{controlplane.WithStore(controlplane.NewMemStore()),
		controlplane.WithReplication(repl), controlplane.Logger(quiet),
		controlplane.Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	return cp
}
