package controlplane

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane/acl"
)

// The etcd store is the acl.Ledger of both: the write guard's (EtcdStore
// itself) and the source fence's (FenceLedger). The guard's and the fence's records of a topic are kept apart, outlive
// the store's restart, and an empty record removes the topic's.
func TestEtcdStoreACLLedgers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	s, err := OpenEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	guard := []acl.Owned{{Principal: "User:repl", Allow: true}, {Principal: "User:app"}}
	fence := []acl.Owned{{Principal: "User:*"}}
	if err := s.PutGuardACLs(ctx, "orders", guard); err != nil {
		t.Fatal(err)
	}
	if err := s.FenceLedger().PutGuardACLs(ctx, "orders", fence); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name string
		led  acl.Ledger
		want []acl.Owned
	}{
		{"the guard's", s, guard},
		{"the fence's", s.FenceLedger(), fence},
	} {
		got, err := tc.led.GuardACLs(ctx, "orders")
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s record after a restart: %v, %v; want %v", tc.name, got, err, tc.want)
		}
		if err := tc.led.PutGuardACLs(ctx, "orders", nil); err != nil {
			t.Fatal(err)
		}
		if got, err := tc.led.GuardACLs(ctx, "orders"); err != nil || got != nil {
			t.Errorf("%s record after an empty put: %v, %v; want none", tc.name, got, err)
		}
	}
}
