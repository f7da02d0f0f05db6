package store_test

import (
	"sync"
	"testing"

	"github.com/baton-kafka/baton/controlplane/store"
	"github.com/baton-kafka/baton/controlplane/storetest"
)

// TestMemStoreConformance: the test double keeps the Store contract, so
// what the control plane's tests show on it holds on etcd too.
func TestMemStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Impl{Open: func(*testing.T) store.Store { return store.NewMemStore() }})
}

// TestEtcdStoreConformance runs the suite on embedded etcd, reopened on
// its data directory for durability.
func TestEtcdStoreConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	t.Parallel()
	var mu sync.Mutex
	dirs := map[store.Store]string{}
	open := func(t *testing.T, dir string) store.Store {
		t.Helper()
		s, err := store.OpenEmbedded(t.Context(), dir)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		dirs[s] = dir
		return s
	}
	storetest.Run(t, storetest.Impl{
		Open: func(t *testing.T) store.Store { return open(t, t.TempDir()) },
		Reopen: func(t *testing.T, s store.Store) store.Store {
			mu.Lock()
			dir := dirs[s]
			mu.Unlock()
			return open(t, dir)
		},
	})
}
