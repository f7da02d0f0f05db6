// Package store owns what the control plane keeps across restarts
// (docs/design.md §3, §13.1): the topics with their states and cutover
// attempts, the config version, the agents' lease state, the audit log's
// events, the ACLs the write guard and the source fence created
// (acl.Ledger), and a cutover attempt's decision, written once. Store is
// its contract (package storetest's suite checks it); EtcdStore keeps it
// on etcd, embedded or external, and holds what replicas share through
// etcd beyond it (replicastore.go); MemStore keeps it in memory, for
// tests.
//
// It does not import the control plane: the control plane's Topic,
// Agent, Event and Store are its types under the control plane's names.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/baton-kafka/baton/controlplane/acl"
)

// Errors. Their text is the control plane's, as before the store was a
// package of its own; package controlplane declares them too.
var (
	// ErrDecided: a cutover attempt's COMPLETE or rollback committed
	// already; the write that got it wrote nothing.
	ErrDecided = errors.New("controlplane: the cutover attempt is decided")
	// ErrStoreUnavailable: a MemStore set unavailable refused a write.
	ErrStoreUnavailable = errors.New("controlplane: store unavailable")
	// ErrDataDirLocked: another process runs an embedded etcd on the
	// data directory; the message names it.
	ErrDataDirLocked = errors.New("controlplane: data directory in use")
	// ErrNotLeader: this control plane's leader term ended (another
	// replica was elected): it wrote nothing and must stop.
	ErrNotLeader = errors.New("controlplane: not the leader")
	// ErrVersionMoved: a follower's lease grant was not recorded, because
	// the config version changed since the follower read it; the agent
	// must apply the new routes first.
	ErrVersionMoved = errors.New("controlplane: the config version moved")
)

// Store keeps the control plane's state: EtcdStore in production,
// MemStore in tests. The contract every implementation keeps, in full, is
// package storetest's, whose suite both run.
type Store interface {
	// Load returns the config version, every topic and every agent.
	Load(ctx context.Context) (version uint64, topics []Topic, agents []Agent, err error)
	// PutTopic writes t and the config version in one transaction.
	PutTopic(ctx context.Context, t Topic, version uint64) error
	// PutTopicUndecided writes t and the config version in one
	// transaction, only if nothing was decided for t's cutover attempt
	// yet; with decide, it also decides the attempt (t is its COMPLETE or
	// its rollback's PROXY). Else it writes nothing and returns
	// ErrDecided with the topic as stored. Exactly one of an attempt's
	// COMPLETE and its rollback commits, whichever writes first: an
	// ambiguous write (etcd applied what the client gave up on) cannot be
	// overwritten by the other.
	PutTopicUndecided(ctx context.Context, t Topic, version uint64, attempt int, decide bool) (Topic, error)
	// DeleteTopic removes a topic, forgets its decided attempts and writes
	// the config version.
	DeleteTopic(ctx context.Context, name string, version uint64) error
	// PutAgents writes agents' lease state.
	PutAgents(ctx context.Context, agents []Agent) error
	// AppendEvent stores e with the next sequence number and returns it.
	AppendEvent(ctx context.Context, e Event) (Event, error)
	// Events returns events after seq, for topic ("" for all), oldest first.
	Events(ctx context.Context, topic string, after uint64) ([]Event, error)
	// Follow sends the events after seq, then each one appended, until
	// ctx ends; then it closes the channel.
	Follow(ctx context.Context, topic string, after uint64) (<-chan Event, error)
	Close() error
}

const (
	keyVersion = "/baton/version"
	keyTopics  = "/baton/topics/"
	keyAgents  = "/baton/agents/"
	keyEvents  = "/baton/events/"
	keyGuard   = "/baton/guard/"
	keyFence   = "/baton/fence/"
	// keyDecided + topic/attempt: the attempt's COMPLETE or rollback
	// committed (PutTopicUndecided).
	keyDecided = "/baton/decided/"
)

// EtcdStore is a Store on etcd, embedded or external.
type EtcdStore struct {
	cli  *clientv3.Client
	emb  *embed.Etcd
	lock *os.File // the data directory's lock, held while emb runs
	mu   sync.Mutex
	seq  uint64
	once sync.Once

	fenceMu sync.Mutex
	fence   *clientv3.Cmp // SetFence (replicas.Campaign): every write needs this term's leader key
}

// Endpoints returns the etcd endpoints the store talks to.
func (s *EtcdStore) Endpoints() []string { return s.cli.Endpoints() }

// write commits ops in one transaction, only while this store's leader
// term holds (when it campaigned): ErrNotLeader after it ended.
func (s *EtcdStore) write(ctx context.Context, ops ...clientv3.Op) error {
	r, err := s.cli.Txn(ctx).If(s.fenceCmps()...).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return ErrNotLeader
	}
	return nil
}

func (s *EtcdStore) fenceCmps() []clientv3.Cmp {
	s.fenceMu.Lock()
	defer s.fenceMu.Unlock()
	if s.fence == nil {
		return nil
	}
	return []clientv3.Cmp{*s.fence}
}

// fenced reports whether this store's leader term ended.
func (s *EtcdStore) fenced(ctx context.Context) bool {
	cmps := s.fenceCmps()
	if len(cmps) == 0 {
		return false
	}
	r, err := s.cli.Txn(ctx).If(cmps...).Commit()
	return err == nil && !r.Succeeded
}

var (
	_ Store      = (*EtcdStore)(nil)
	_ acl.Ledger = (*EtcdStore)(nil)
)

// GuardACLs implements acl.Ledger: the destination write guard's record.
func (s *EtcdStore) GuardACLs(ctx context.Context, topic string) ([]acl.Owned, error) {
	return s.ownedACLs(ctx, keyGuard, topic)
}

// PutGuardACLs implements acl.Ledger.
func (s *EtcdStore) PutGuardACLs(ctx context.Context, topic string, acls []acl.Owned) error {
	if err := s.putOwnedACLs(ctx, keyGuard, topic, acls); err != nil {
		return fmt.Errorf("controlplane: etcd: the guard's record of %s: %w", topic, err)
	}
	return nil
}

// FenceLedger is the ledger of the ACLs the source fence created, apart
// from the destination write guard's.
func (s *EtcdStore) FenceLedger() acl.Ledger { return fenceLedger{s} }

type fenceLedger struct{ s *EtcdStore }

var _ acl.Ledger = fenceLedger{}

func (l fenceLedger) GuardACLs(ctx context.Context, topic string) ([]acl.Owned, error) {
	return l.s.ownedACLs(ctx, keyFence, topic)
}

func (l fenceLedger) PutGuardACLs(ctx context.Context, topic string, acls []acl.Owned) error {
	if err := l.s.putOwnedACLs(ctx, keyFence, topic, acls); err != nil {
		return fmt.Errorf("controlplane: etcd: the source fence's record of %s: %w", topic, err)
	}
	return nil
}

func (s *EtcdStore) ownedACLs(ctx context.Context, prefix, topic string) ([]acl.Owned, error) {
	r, err := s.cli.Get(ctx, prefix+topic)
	if err != nil {
		return nil, fmt.Errorf("controlplane: etcd: %w", err)
	}
	if len(r.Kvs) == 0 {
		return nil, nil
	}
	var out []acl.Owned
	if err := json.Unmarshal(r.Kvs[0].Value, &out); err != nil {
		return nil, fmt.Errorf("controlplane: bad record %s: %w", r.Kvs[0].Key, err)
	}
	return out, nil
}

// putOwnedACLs writes (fenced: see write) topic's record under prefix;
// none deletes it.
func (s *EtcdStore) putOwnedACLs(ctx context.Context, prefix, topic string, acls []acl.Owned) error {
	if len(acls) == 0 {
		return s.write(ctx, clientv3.OpDelete(prefix+topic))
	}
	b, err := json.Marshal(acls)
	if err != nil {
		return err
	}
	return s.write(ctx, clientv3.OpPut(prefix+topic, string(b)))
}

// OpenEtcd connects to an external etcd cluster.
func OpenEtcd(ctx context.Context, endpoints []string) (*EtcdStore, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Context: ctx})
	if err != nil {
		return nil, fmt.Errorf("controlplane: etcd %v: %w", endpoints, err)
	}
	s := &EtcdStore{cli: cli}
	if err := s.loadSeq(ctx); err != nil {
		_ = cli.Close()
		return nil, err
	}
	return s, nil
}

// Close disconnects and stops the embedded etcd, if any.
func (s *EtcdStore) Close() error {
	var err error
	s.once.Do(func() {
		err = s.cli.Close()
		if s.emb != nil {
			s.emb.Close()
		}
		if s.lock != nil {
			_ = s.lock.Close() // releases the flock
		}
	})
	return err
}

func (s *EtcdStore) loadSeq(ctx context.Context) error {
	seq, _, err := s.lastEvent(ctx)
	if err != nil {
		return err
	}
	s.seq = seq
	return nil
}

// lastEvent returns the sequence number and value of the last event in
// etcd; 0 and nil for an empty log.
func (s *EtcdStore) lastEvent(ctx context.Context) (uint64, []byte, error) {
	r, err := s.cli.Get(ctx, keyEvents, clientv3.WithLastKey()...)
	if err != nil {
		return 0, nil, fmt.Errorf("controlplane: reading the event log: %w", err)
	}
	if len(r.Kvs) == 0 {
		return 0, nil, nil
	}
	seq, err := strconv.ParseUint(strings.TrimPrefix(string(r.Kvs[0].Key), keyEvents), 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("controlplane: bad event key %q", r.Kvs[0].Key)
	}
	return seq, r.Kvs[0].Value, nil
}

// Load implements Store.
func (s *EtcdStore) Load(ctx context.Context) (uint64, []Topic, []Agent, error) {
	var version uint64
	r, err := s.cli.Get(ctx, keyVersion)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("controlplane: etcd: %w", err)
	}
	if len(r.Kvs) > 0 {
		if version, err = strconv.ParseUint(string(r.Kvs[0].Value), 10, 64); err != nil {
			return 0, nil, nil, fmt.Errorf("controlplane: bad version %q", r.Kvs[0].Value)
		}
	}
	var topics []Topic
	if err := s.list(ctx, keyTopics, func(b []byte) error {
		var t Topic
		err := json.Unmarshal(b, &t)
		topics = append(topics, t)
		return err
	}); err != nil {
		return 0, nil, nil, err
	}
	var agents []Agent
	if err := s.list(ctx, keyAgents, func(b []byte) error {
		var a Agent
		err := json.Unmarshal(b, &a)
		agents = append(agents, a)
		return err
	}); err != nil {
		return 0, nil, nil, err
	}
	return version, topics, agents, nil
}

func (s *EtcdStore) list(ctx context.Context, prefix string, each func([]byte) error) error {
	r, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("controlplane: etcd: %w", err)
	}
	for _, kv := range r.Kvs {
		if err := each(kv.Value); err != nil {
			return fmt.Errorf("controlplane: bad record %s: %w", kv.Key, err)
		}
	}
	return nil
}

// PutTopic implements Store.
func (s *EtcdStore) PutTopic(ctx context.Context, t Topic, version uint64) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	err = s.write(ctx,
		clientv3.OpPut(keyTopics+t.Name, string(b)),
		clientv3.OpPut(keyVersion, strconv.FormatUint(version, 10)),
	)
	if err != nil {
		return fmt.Errorf("controlplane: etcd: writing topic %s: %w", t.Name, err)
	}
	return nil
}

func decidedKey(topic string, attempt int) string {
	return fmt.Sprintf("%s%s/%d", keyDecided, topic, attempt)
}

// PutTopicUndecided implements Store.
func (s *EtcdStore) PutTopicUndecided(ctx context.Context, t Topic, version uint64, attempt int, decide bool) (Topic, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return Topic{}, err
	}
	ops := []clientv3.Op{clientv3.OpPut(keyTopics+t.Name, string(b)), clientv3.OpPut(keyVersion, strconv.FormatUint(version, 10))}
	if decide {
		ops = append(ops, clientv3.OpPut(decidedKey(t.Name, attempt), "decided"))
	}
	// The leader's term first: a deposed leader is told ErrNotLeader,
	// whatever was decided.
	undecided := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(decidedKey(t.Name, attempt)), "=", 0)},
		ops, []clientv3.Op{clientv3.OpGet(keyTopics + t.Name)})
	r, err := s.cli.Txn(ctx).If(s.fenceCmps()...).Then(undecided).Commit()
	if err != nil {
		return Topic{}, fmt.Errorf("controlplane: etcd: writing topic %s: %w", t.Name, err)
	}
	if !r.Succeeded {
		return Topic{}, ErrNotLeader
	}
	inner := r.Responses[0].GetResponseTxn()
	if inner.GetSucceeded() {
		return t, nil
	}
	stored := inner.GetResponses()[0].GetResponseRange()
	var cur Topic
	if len(stored.Kvs) > 0 {
		if err := json.Unmarshal(stored.Kvs[0].Value, &cur); err != nil {
			return Topic{}, fmt.Errorf("controlplane: bad record %s: %w", stored.Kvs[0].Key, err)
		}
	}
	return cur, fmt.Errorf("%w: %s attempt %d", ErrDecided, t.Name, attempt)
}

// DeleteTopic implements Store.
func (s *EtcdStore) DeleteTopic(ctx context.Context, name string, version uint64) error {
	err := s.write(ctx,
		clientv3.OpDelete(keyTopics+name),
		clientv3.OpDelete(keyLatency+name),
		// Attempts count from 1 again if the topic is added again.
		clientv3.OpDelete(keyDecided+name+"/", clientv3.WithPrefix()),
		clientv3.OpPut(keyVersion, strconv.FormatUint(version, 10)),
	)
	if err != nil {
		return fmt.Errorf("controlplane: etcd: deleting topic %s: %w", name, err)
	}
	return nil
}

// PutAgents implements Store, in transactions of at most 64 agents.
func (s *EtcdStore) PutAgents(ctx context.Context, agents []Agent) error {
	for len(agents) > 0 {
		n := min(len(agents), 64)
		ops := make([]clientv3.Op, 0, n)
		for _, a := range agents[:n] {
			b, err := json.Marshal(a)
			if err != nil {
				return err
			}
			ops = append(ops, clientv3.OpPut(keyAgents+a.Node, string(b)))
		}
		if err := s.write(ctx, ops...); err != nil {
			return fmt.Errorf("controlplane: etcd: writing agents: %w", err)
		}
		agents = agents[n:]
	}
	return nil
}

func eventKey(seq uint64) string { return fmt.Sprintf("%s%020d", keyEvents, seq) }

// AppendEvent implements Store. The log is create-only: an event never
// overwrites one. etcd may apply a write it answered with an error
// ("request timed out" after a stall), so a failed or refused append looks
// at where the log ends before trying again: if the last event there is
// this one, it was appended; else it goes after it. Without that, one such
// write left the next sequence number taken and every later event failed.
func (s *EtcdStore) AppendEvent(ctx context.Context, e Event) (Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last error
	for attempt := range appendAttempts {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
			ours, err := s.resyncSeq(ctx, e)
			if err != nil {
				last = err
				continue
			}
			if ours {
				e.Seq = s.seq
				return e, nil
			}
		}
		e.Seq = s.seq + 1
		b, err := json.Marshal(e)
		if err != nil {
			return e, err
		}
		key := eventKey(e.Seq)
		r, err := s.cli.Txn(ctx).If(append(s.fenceCmps(), clientv3.Compare(clientv3.CreateRevision(key), "=", 0))...).
			Then(clientv3.OpPut(key, string(b))).Commit()
		switch {
		case err != nil:
			last = fmt.Errorf("controlplane: etcd: appending event: %w", err)
		case !r.Succeeded && s.fenced(ctx):
			return e, fmt.Errorf("%w: appending event", ErrNotLeader)
		case !r.Succeeded:
			last = fmt.Errorf("controlplane: event %d already written (by another control plane, or an earlier attempt)", e.Seq)
		default:
			s.seq = e.Seq
			return e, nil
		}
	}
	return e, last
}

// appendAttempts bounds AppendEvent's tries.
const appendAttempts = 5

// resyncSeq sets s.seq to the last event in etcd, and reports whether that
// event is e (an earlier attempt of this append, applied after all).
func (s *EtcdStore) resyncSeq(ctx context.Context, e Event) (bool, error) {
	seq, value, err := s.lastEvent(ctx)
	if err != nil {
		return false, err
	}
	s.seq = seq
	var got Event
	if value == nil || json.Unmarshal(value, &got) != nil {
		return false, nil // not this one, whatever it is
	}
	got.Seq, e.Seq = 0, 0
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(e)
	return string(a) == string(b), nil
}

// Events implements Store.
func (s *EtcdStore) Events(ctx context.Context, topic string, after uint64) ([]Event, error) {
	var out []Event
	err := s.list(ctx, keyEvents, func(b []byte) error {
		var e Event
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		if e.Seq > after && (topic == "" || e.Topic == topic) {
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// Follow implements Store: the events after seq, then each new one.
func (s *EtcdStore) Follow(ctx context.Context, topic string, after uint64) (<-chan Event, error) {
	r, err := s.cli.Get(ctx, keyVersion, clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("controlplane: etcd: %w", err)
	}
	rev := r.Header.Revision
	past, err := s.Events(ctx, topic, after)
	if err != nil {
		return nil, err
	}
	// Events appended between the two reads come from the watch; skip
	// duplicates by sequence.
	wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), keyEvents, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	out := make(chan Event, 64)
	go func() {
		defer close(out)
		last := after
		send := func(e Event) bool {
			if e.Seq <= last || (topic != "" && e.Topic != topic) {
				return true
			}
			last = e.Seq
			select {
			case out <- e:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for _, e := range past {
			if !send(e) {
				return
			}
		}
		for w := range wch {
			for _, ev := range w.Events {
				var e Event
				if json.Unmarshal(ev.Kv.Value, &e) == nil && !send(e) {
					return
				}
			}
		}
	}()
	return out, nil
}
