package store

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane/acl"
)

// A second embedded etcd on a data directory in use fails at once, naming
// the holder, instead of waiting on etcd's database lock forever; the
// directory is free again once the first store closes.
func TestEmbeddedDataDirLocked(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded etcd")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	first, err := OpenEmbedded(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()

	type result struct {
		s   *EtcdStore
		err error
	}
	done := make(chan result, 1)
	go func() { s, err := OpenEmbedded(ctx, dir); done <- result{s, err} }()
	var got result
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a second OpenEmbedded on a used data directory still waits after 30s")
	}
	if got.err == nil {
		_ = got.s.Close()
		t.Fatal("a second OpenEmbedded on a used data directory succeeded")
	}
	if !errors.Is(got.err, ErrDataDirLocked) || !strings.Contains(got.err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("got %v, want ErrDataDirLocked naming pid %d", got.err, os.Getpid())
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := OpenEmbedded(ctx, dir)
	if err != nil {
		t.Fatalf("after the first store closed: %v", err)
	}
	_ = again.Close()
}

// TestAppendEventAfterAnUncertainWrite: etcd may apply a write it answered
// with an error ("request timed out" after a stall). The event log must
// not then lose every later event to a sequence number already taken: an
// append whose number is taken by itself counts as done (no duplicate),

// Event kinds the tests append: the store keeps any.
const kindAdded, kindTimedOut, kindDrained, kindRolledBack = "added", "timed_out", "agent_drained", "rolled_back"

// one taken by another event goes after it.
func TestAppendEventAfterAnUncertainWrite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := OpenEmbedded(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(e Event) { // as an attempt etcd applied although it answered an error
		t.Helper()
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.cli.Put(ctx, eventKey(e.Seq), string(b)); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Now().UTC()
	e1 := Event{Topic: "t", Kind: kindAdded, Time: at}
	if _, err := s.AppendEvent(ctx, e1); err != nil {
		t.Fatal(err)
	}
	e2 := Event{Topic: "t", Kind: kindTimedOut, Time: at.Add(time.Second)}
	applied := e2
	applied.Seq = 2
	put(applied)
	if got, err := s.AppendEvent(ctx, e2); err != nil || got.Seq != 2 {
		t.Fatalf("appending an event already applied at 2: seq %d, %v; want 2, no error", got.Seq, err)
	}
	put(Event{Seq: 3, Topic: "t", Kind: kindDrained, Time: at.Add(2 * time.Second)})
	e3 := Event{Topic: "t", Kind: kindRolledBack, Time: at.Add(3 * time.Second)}
	if got, err := s.AppendEvent(ctx, e3); err != nil || got.Seq != 4 {
		t.Fatalf("appending after an event written by another: seq %d, %v; want 4, no error", got.Seq, err)
	}
	evs, err := s.Events(ctx, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if want := []string{kindAdded, kindTimedOut, kindDrained, kindRolledBack}; !slices.Equal(kinds, want) {
		t.Errorf("event log %v, want %v", kinds, want)
	}
}

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
