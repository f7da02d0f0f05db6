package controlplane_test

import (
	"sync"
	"testing"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/storetest"
)

// TestMemStoreConformance: the test double keeps the Store contract, so
// what the control plane's tests show on it holds on etcd too.
func TestMemStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Impl{Open: func(*testing.T) controlplane.Store { return controlplane.NewMemStore() }})
}

// TestEtcdStoreConformance runs the suite on embedded etcd, reopened on
// its data directory for durability.
func TestEtcdStoreConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	t.Parallel()
	var mu sync.Mutex
	dirs := map[controlplane.Store]string{}
	open := func(t *testing.T, dir string) controlplane.Store {
		t.Helper()
		s, err := controlplane.OpenEmbedded(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		dirs[s] = dir
		return s
	}
	storetest.Run(t, storetest.Impl{
		Open: func(t *testing.T) controlplane.Store { return open(t, t.TempDir()) },
		Reopen: func(t *testing.T, s controlplane.Store) controlplane.Store {
			mu.Lock()
			dir := dirs[s]
			mu.Unlock()
			return open(t, dir)
		},
	})
}
