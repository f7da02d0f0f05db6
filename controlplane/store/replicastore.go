package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/baton-kafka/baton/controlplane/shadow"
)

// What replicas share through etcd beyond Store (docs/design.md §13.1),
// for package replicas: followers read the routes' state at one revision
// and watch it; they record the leases they grant, each conditioned on the
// config version they granted at; the leader reads and watches those
// records. The keys stay this store's; replicas reaches them through these
// methods only.

// Client is the store's etcd client: package replicas campaigns, registers
// replicas and reads the cluster's health through it, outside the store's
// keys.
func (s *EtcdStore) Client() *clientv3.Client { return s.cli }

// SetFence makes every write of the store from now on commit only while
// cmp holds: Campaign's, this term's leader key (a write after the term
// ended fails with ErrNotLeader).
func (s *EtcdStore) SetFence(cmp clientv3.Cmp) {
	s.fenceMu.Lock()
	s.fence = &cmp
	s.fenceMu.Unlock()
}

// keyLatency holds each topic's destination latency profile as the leader
// last pushed it, for followers to push the same. It sorts between
// keyTopics' neighbours so one watch range covers the routes' whole state.
const keyLatency = "/baton/tlatency/"

// routeStateRange is the key range of everything a route is rendered from:
// keyLatency, keyTopics and keyVersion ("/baton/t" up to "/baton/w").
const routeStateFrom, routeStateEnd = "/baton/t", "/baton/w"

// RouteState is the routes' state at one etcd revision: what a follower
// renders its routes from (Resources).
type RouteState struct {
	Rev     int64
	Version uint64
	Topics  map[string]*Topic
	// Latency are the latency profiles the leader pushed.
	Latency map[string]shadow.Profile
}

// LoadRouteState reads the routes' state at one revision.
func (s *EtcdStore) LoadRouteState(ctx context.Context) (RouteState, error) {
	r, err := s.cli.Get(ctx, routeStateFrom, clientv3.WithRange(routeStateEnd))
	if err != nil {
		return RouteState{}, fmt.Errorf("controlplane: etcd: %w", err)
	}
	st := RouteState{Rev: r.Header.Revision, Topics: map[string]*Topic{}, Latency: map[string]shadow.Profile{}}
	for _, kv := range r.Kvs {
		if err := st.Apply(false, kv.Key, kv.Value); err != nil {
			return RouteState{}, err
		}
	}
	return st, nil
}

// Apply changes st by one key's put or delete (a watched event of
// WatchRouteState); other keys change nothing.
func (st *RouteState) Apply(del bool, key, value []byte) error {
	k := string(key)
	switch {
	case k == keyVersion:
		if del {
			st.Version = 0
			return nil
		}
		v, err := strconv.ParseUint(string(value), 10, 64)
		if err != nil {
			return fmt.Errorf("controlplane: bad version %q", value)
		}
		st.Version = v
	case strings.HasPrefix(k, keyTopics):
		name := strings.TrimPrefix(k, keyTopics)
		if del {
			delete(st.Topics, name)
			return nil
		}
		var t Topic
		if err := json.Unmarshal(value, &t); err != nil {
			return fmt.Errorf("controlplane: bad record %s: %w", k, err)
		}
		st.Topics[name] = &t
	case strings.HasPrefix(k, keyLatency):
		name := strings.TrimPrefix(k, keyLatency)
		if del {
			delete(st.Latency, name)
			return nil
		}
		var l shadow.Profile
		if err := json.Unmarshal(value, &l); err != nil {
			return fmt.Errorf("controlplane: bad record %s: %w", k, err)
		}
		st.Latency[name] = l
	}
	return nil
}

// WatchRouteState watches the routes' state after revision rev.
func (s *EtcdStore) WatchRouteState(ctx context.Context, rev int64) clientv3.WatchChan {
	return s.cli.Watch(clientv3.WithRequireLeader(ctx), routeStateFrom, clientv3.WithRange(routeStateEnd), clientv3.WithRev(rev+1))
}

// PutLatency records the latency profiles the leader pushed (fenced on its
// term, like every write of it).
func (s *EtcdStore) PutLatency(ctx context.Context, profiles map[string]shadow.Profile) error {
	ops := make([]clientv3.Op, 0, len(profiles))
	for name, l := range profiles {
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(keyLatency+name, string(b)))
	}
	for len(ops) > 0 {
		n := min(len(ops), 64)
		if err := s.write(ctx, ops[:n]...); err != nil {
			return fmt.Errorf("controlplane: etcd: writing latency profiles: %w", err)
		}
		ops = ops[n:]
	}
	return nil
}

// maxRecordBytes bounds one transaction of agent records, well under
// etcd's default request limit (1.5 MiB).
const maxRecordBytes = 512 << 10

// RecordGrants stores the agents a follower granted a lease at config
// version, in transactions that commit only if the config version is
// still that one: a grant made on a version the leader has moved past is
// never recorded (ErrVersionMoved), so the leader, once it stored a new
// version, knows every grant made before it. (The version's value, not
// its key's revision: a cutover's steps store the topic with the same
// version again.)
func (s *EtcdStore) RecordGrants(ctx context.Context, version uint64, agents []Agent) error {
	still := clientv3.Compare(clientv3.Value(keyVersion), "=", strconv.FormatUint(version, 10))
	if version == 0 {
		still = clientv3.Compare(clientv3.CreateRevision(keyVersion), "=", 0) // none stored yet
	}
	return s.recordAgents(agents, func(ops []clientv3.Op) error {
		r, err := s.cli.Txn(ctx).If(still).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("controlplane: etcd: recording leases: %w", err)
		}
		if !r.Succeeded {
			return ErrVersionMoved
		}
		return nil
	})
}

// RecordReports stores agents' reports a follower answered without a
// grant: a refused heartbeat carries writes and findings the agent drops
// once answered.
func (s *EtcdStore) RecordReports(ctx context.Context, agents []Agent) error {
	return s.recordAgents(agents, func(ops []clientv3.Op) error {
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("controlplane: etcd: recording agents' reports: %w", err)
		}
		return nil
	})
}

// recordAgents commits agents' records through commit, as many per
// transaction as fit in maxRecordBytes; the first error stops it.
func (s *EtcdStore) recordAgents(agents []Agent, commit func([]clientv3.Op) error) error {
	var ops []clientv3.Op
	size := 0
	for _, a := range agents {
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		if len(ops) > 0 && size+len(b) > maxRecordBytes {
			if err := commit(ops); err != nil {
				return err
			}
			ops, size = nil, 0
		}
		ops, size = append(ops, clientv3.OpPut(keyAgents+a.Node, string(b))), size+len(b)
	}
	if len(ops) == 0 {
		return nil
	}
	return commit(ops)
}

// RecordedAgent is an agent record with its etcd mod revision.
type RecordedAgent struct {
	Agent
	Rev int64
}

// ReadAgents returns every agent record and the revision read at.
func (s *EtcdStore) ReadAgents(ctx context.Context) ([]RecordedAgent, int64, error) {
	r, err := s.cli.Get(ctx, keyAgents, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("controlplane: etcd: %w", err)
	}
	out := make([]RecordedAgent, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		var a Agent
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return nil, 0, fmt.Errorf("controlplane: bad record %s: %w", kv.Key, err)
		}
		out = append(out, RecordedAgent{a, kv.ModRevision})
	}
	return out, r.Header.Revision, nil
}

// WatchAgents watches agent records after revision rev, on a watch
// stream of its own (recordsStream).
func (s *EtcdStore) WatchAgents(ctx context.Context, rev int64) clientv3.WatchChan {
	return s.cli.Watch(recordsStream(ctx), keyAgents, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
}

// RequestRecordsProgress asks the watch of agent records (WatchAgents) to
// say how far it got.
func (s *EtcdStore) RequestRecordsProgress(ctx context.Context) error {
	return s.cli.RequestProgress(recordsStream(ctx))
}

// recordsStream gives ctx the metadata that puts the watch of agent
// records on a gRPC watch stream of its own: the client shares a stream
// between watches of the same metadata, and etcd answers a progress
// request only once every watch on the stream is synced (a watch of the
// event log started at the next revision is not, until an event comes).
func recordsStream(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "baton-watch", "agent-records")
}

// Revision is etcd's current revision.
func (s *EtcdStore) Revision(ctx context.Context) (int64, error) {
	r, err := s.cli.Get(ctx, keyVersion)
	if err != nil {
		return 0, fmt.Errorf("controlplane: etcd: %w", err)
	}
	return r.Header.Revision, nil
}
