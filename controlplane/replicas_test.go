package controlplane

import (
	"context"
	"errors"
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/replication"
)

// TestNewNeedsRecordsAmongReplicas: a replica on etcd is refused without
// the watch of the records other replicas write (WithRecords): it would
// not know the leases they grant, and could drain a cutover while an agent
// they granted still forwards.
func TestNewNeedsRecordsAmongReplicas(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// An EtcdStore New never reaches: it refuses the configuration first,
	// by the store's type, so no etcd need run.
	st := &EtcdStore{}
	_, err := New(ctx, WithStore(st), WithReplication(&replication.ReplicatorAdapter{}), ReplicaID("L"), Logger(quiet),
		Clusters(&batonv1.Cluster{Name: "source"}, &batonv1.Cluster{Name: "destination"}))
	if !errors.Is(err, ErrBadConfig) {
		t.Fatalf("New on etcd with a replica id and no records: %v, want ErrBadConfig", err)
	}
}
