package replicas

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/baton-kafka/baton/controlplane"
)

// Leader election between control-plane replicas on one etcd
// (docs/design.md §13.1). Every replica campaigns; the one elected changes
// the state (cutovers, topics, events, the HTTP API, replication) and
// every write it makes to etcd is fenced on its election key: once its
// term ends (its etcd session expired, another replica was elected) no
// write of it commits, so a leader that lost its election cannot change
// the state. The others wait in the campaign, registered so that `baton
// controlplane status` lists them, and serve routes and leases meanwhile
// from the state they watch (follower.go). The keys below are this
// package's: the store's own keys are package controlplane's.

const (
	keyLeader   = "/baton/leader"
	keyReplicas = "/baton/replicas/"
	// DefaultLeaderTTL is the etcd session of a replica: a leader that
	// dies is replaced after about this long.
	DefaultLeaderTTL = 2 * time.Second
)

// Replica is a control-plane replica as registered in etcd.
type Replica struct {
	ID      string    `json:"id"`
	GRPC    string    `json:"grpc"`
	HTTP    string    `json:"http"`
	Started time.Time `json:"started"`
}

// Leadership is a replica's place in the election: registered from
// Campaign, leader once Campaign returns, until Lost is closed.
type Leadership struct {
	replica  Replica
	store    *controlplane.EtcdStore
	session  *concurrency.Session
	election *concurrency.Election
	fence    clientv3.Cmp // the term's: its leader key is still the one elected
}

// Campaign registers r and blocks until it is elected leader or ctx ends.
// From then on every write through store is fenced on this term. ttl is
// the etcd session (whole seconds, at least 1; DefaultLeaderTTL if 0).
func Campaign(ctx context.Context, store *controlplane.EtcdStore, r Replica, ttl time.Duration) (*Leadership, error) {
	if ttl == 0 {
		ttl = DefaultLeaderTTL
	}
	secs := int(math.Ceil(ttl.Seconds()))
	if secs < 1 {
		return nil, fmt.Errorf("%w: leader ttl %v: at least 1s", controlplane.ErrBadConfig, ttl)
	}
	if r.ID == "" {
		return nil, fmt.Errorf("%w: replica id is empty", controlplane.ErrBadConfig)
	}
	cli := store.Client()
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(secs), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("replicas: etcd session: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		_ = session.Close()
		return nil, err
	}
	if _, err := cli.Put(ctx, keyReplicas+r.ID, string(b), clientv3.WithLease(session.Lease())); err != nil {
		_ = session.Close()
		return nil, fmt.Errorf("replicas: etcd: registering replica %s: %w", r.ID, err)
	}
	e := concurrency.NewElection(session, keyLeader)
	if err := e.Campaign(ctx, r.ID); err != nil {
		_ = session.Close()
		return nil, fmt.Errorf("replicas: campaigning for leader: %w", err)
	}
	fence := clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())
	store.SetFence(fence)
	return &Leadership{replica: r, store: store, session: session, election: e, fence: fence}, nil
}

// Serving records the addresses the elected replica serves on, once bound
// (the flags may name port 0), fenced on the term like every write of the
// store (controlplane.ErrNotLeader once it ended).
func (l *Leadership) Serving(ctx context.Context, grpcAddr, httpURL string) error {
	l.replica.GRPC, l.replica.HTTP = grpcAddr, httpURL
	b, err := json.Marshal(l.replica)
	if err != nil {
		return err
	}
	put := clientv3.OpPut(keyReplicas+l.replica.ID, string(b), clientv3.WithLease(l.session.Lease()))
	r, err := l.store.Client().Txn(ctx).If(l.fence).Then(put).Commit()
	if err == nil && !r.Succeeded {
		err = controlplane.ErrNotLeader
	}
	if err != nil {
		return fmt.Errorf("replicas: etcd: recording replica %s: %w", l.replica.ID, err)
	}
	return nil
}

// Lost is closed when this replica's term ends: its etcd session expired
// or was closed. The control plane MUST stop then; its writes fail with
// controlplane.ErrNotLeader already.
func (l *Leadership) Lost() <-chan struct{} { return l.session.Done() }

// Resign ends the term at once (a clean stop), so another replica is
// elected without waiting for the session to expire.
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.election.Resign(ctx)
	if cerr := l.session.Close(); err == nil {
		err = cerr
	}
	return err
}

// ClusterStatus is what `baton controlplane status` shows.
type ClusterStatus struct {
	Leader   string         `json:"leader"`
	Replicas []Replica      `json:"replicas"`
	Etcd     []EtcdMember   `json:"etcd"`
	Agents   map[string]int `json:"agents"` // replica id -> agents whose lease it granted and that is still valid
}

// EtcdMember is one etcd endpoint's health.
type EtcdMember struct {
	Endpoint string `json:"endpoint"`
	Healthy  bool   `json:"healthy"`
	Leader   bool   `json:"leader"`
	Version  string `json:"version,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Status reads the replicas, the leader, each etcd endpoint's health and
// the agents holding leases per replica from store's etcd.
func Status(ctx context.Context, store *controlplane.EtcdStore) (ClusterStatus, error) {
	st := ClusterStatus{Agents: map[string]int{}}
	cli := store.Client()
	for _, ep := range cli.Endpoints() {
		m := EtcdMember{Endpoint: ep}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			m.Error = err.Error()
		} else {
			m.Healthy, m.Leader, m.Version = len(r.Errors) == 0, r.Leader == r.Header.GetMemberId(), r.Version
			if len(r.Errors) > 0 {
				m.Error = fmt.Sprint(r.Errors)
			}
		}
		st.Etcd = append(st.Etcd, m)
	}
	rs, err := cli.Get(ctx, keyReplicas, clientv3.WithPrefix())
	if err != nil {
		return st, fmt.Errorf("replicas: etcd: %w", err)
	}
	for _, kv := range rs.Kvs {
		var r Replica
		if json.Unmarshal(kv.Value, &r) == nil {
			st.Replicas = append(st.Replicas, r)
		}
	}
	// The leader is the campaign key with the lowest create revision.
	lr, err := cli.Get(ctx, keyLeader+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return st, fmt.Errorf("replicas: etcd: %w", err)
	}
	if len(lr.Kvs) > 0 {
		st.Leader = string(lr.Kvs[0].Value)
	}
	_, _, agents, err := store.Load(ctx)
	if err != nil {
		return st, err
	}
	now := time.Now()
	for _, a := range agents {
		if now.Before(a.ExpiresAt) {
			st.Agents[a.Replica]++
		}
	}
	return st, nil
}
