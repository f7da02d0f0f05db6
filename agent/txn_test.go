package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// TestTransactionsThroughTheAgent: a transactional producer's requests go
// to the source verbatim while its topic is in PROXY (InitProducerId,
// FindCoordinator, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit,
// EndTxn): a committed transaction is on the source, read_committed, with
// its group offset; an aborted one is not. A transactional write to a
// COMPLETE topic is refused TOPIC_AUTHORIZATION_FAILED, nothing reaching
// either cluster, and said once at WARN for its transactional id; so is
// AddPartitionsToTxn naming it (the other partitions
// OPERATION_NOT_ATTEMPTED), while one naming a MIGRATING topic is answered
// CONCURRENT_TRANSACTIONS, for the client to retry.
func TestTransactionsThroughTheAgent(t *testing.T) {
	t.Parallel()
	const (
		proxy     = "txn-proxy"
		complete  = "txn-complete"
		migrating = "txn-migrating"
		held      = "txn-held"
		toProxy   = "txn-tv1-back"
		toDone    = "txn-tv1-complete"
		group     = "txn-group"
	)
	var log testlog.Buffer
	routes := []agent.Route{
		{Topic: proxy, State: migration.Proxy},
		{Topic: complete, State: migration.Complete},
		{Topic: migrating, State: migration.Migrating, Mode: migration.Retriable},
		{Topic: held, State: migration.Migrating, Mode: migration.Hold, HoldMax: time.Minute},
		{Topic: toProxy, State: migration.Migrating, Mode: migration.Hold, HoldMax: time.Minute},
		{Topic: toDone, State: migration.Migrating, Mode: migration.Hold, HoldMax: time.Minute},
	}
	var routesMu sync.Mutex
	table := agent.NewRouteTable(slices.Clone(routes))
	f := startFixture(t, nil, agent.Routes(table), agent.Logger(slog.New(slog.NewTextHandler(&log, nil))))
	for _, c := range []string{f.src.Bootstrap(), f.dst.Bootstrap()} {
		for _, tp := range []string{proxy, complete, migrating, held, toProxy, toDone} {
			createTopic(t, c, tp, 2)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	txn := func(id string) *kgo.Client {
		return newClient(t, f.addr, kgo.TransactionalID(id), kgo.TransactionTimeout(10*time.Second),
			kgo.RecordDeliveryTimeout(20*time.Second))
	}
	records := func(topic, prefix string, n int) []*kgo.Record {
		var rs []*kgo.Record
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "%s-%d", prefix, i), Value: []byte("v")})
		}
		return rs
	}

	t.Run("proxy", func(t *testing.T) {
		cl := txn("app-proxy")
		// Committed, with the group's offset in the transaction.
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, records(proxy, "committed", 10)...).FirstErr(); err != nil {
			t.Fatalf("transactional produce to a PROXY topic: %v", err)
		}
		pid, epoch, err := cl.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		addOffsets := kmsg.NewPtrAddOffsetsToTxnRequest()
		addOffsets.TransactionalID, addOffsets.ProducerID, addOffsets.ProducerEpoch, addOffsets.Group = "app-proxy", pid, epoch, group
		resp, err := addOffsets.RequestWith(ctx, cl)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("AddOffsetsToTxn through the agent: %v, code %d", err, resp.ErrorCode)
		}
		commit := kmsg.NewPtrTxnOffsetCommitRequest()
		commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = "app-proxy", group, pid, epoch
		commit.Generation, commit.MemberID = -1, ""
		ct := kmsg.NewTxnOffsetCommitRequestTopic()
		ct.Topic = proxy
		cp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		cp.Partition, cp.Offset, cp.LeaderEpoch = 0, 42, -1
		ct.Partitions = append(ct.Partitions, cp)
		commit.Topics = append(commit.Topics, ct)
		cresp, err := commit.RequestWith(ctx, cl)
		if err != nil || len(cresp.Topics) != 1 || cresp.Topics[0].Partitions[0].ErrorCode != 0 {
			t.Fatalf("TxnOffsetCommit through the agent: %v, %+v", err, cresp)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("EndTxn (commit) through the agent: %v", err)
		}
		// Aborted.
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, records(proxy, "aborted", 5)...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatalf("EndTxn (abort) through the agent: %v", err)
		}

		got := readCommitted(t, ctx, f.src.Bootstrap(), proxy)
		for i := range 10 {
			if !got[fmt.Sprintf("committed-%d", i)] {
				t.Errorf("committed-%d is not on the source (read_committed): %v", i, got)
			}
		}
		for k := range got {
			if strings.HasPrefix(k, "aborted-") {
				t.Errorf("aborted record %s visible read_committed on the source", k)
			}
		}
		offs, err := kadm.NewClient(newClient(t, f.src.Bootstrap())).FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := offs.Lookup(proxy, 0); !ok || o.At != 42 {
			t.Errorf("the source's %s offset of %s/0: %+v (%v), want 42, committed with the transaction", group, proxy, o, ok)
		}
	})

	t.Run("complete", func(t *testing.T) {
		cl := txn("app-complete")
		for range 2 {
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			err := cl.ProduceSync(ctx, records(complete, "refused", 3)...).FirstErr()
			if !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Fatalf("transactional produce to a COMPLETE topic: %v, want TOPIC_AUTHORIZATION_FAILED", err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatalf("aborting after the refusal: %v", err)
			}
		}
		for name, c := range map[string]string{"source": f.src.Bootstrap(), "destination": f.dst.Bootstrap()} {
			ends, err := kadm.NewClient(newClient(t, c)).ListEndOffsets(ctx, complete)
			if err != nil {
				t.Fatal(err)
			}
			ends.Each(func(o kadm.ListedOffset) {
				if o.Offset != 0 {
					t.Errorf("%s %s/%d ends at %d: a refused transactional record was written", name, complete, o.Partition, o.Offset)
				}
			})
		}
		// An idempotent producer still writes the COMPLETE topic.
		idem := newClient(t, f.addr)
		if err := idem.ProduceSync(ctx, records(complete, "idempotent", 1)...).FirstErr(); err != nil {
			t.Fatalf("idempotent produce to a COMPLETE topic: %v", err)
		}
		if n := strings.Count(log.String(), "transactional_id=app-complete"); n != 1 {
			t.Errorf("%d log lines name transactional id app-complete, want one WARN for two refused transactions:\n%s", n, log.String())
		}
	})

	// A transactional produce held through MIGRATING is routed by the
	// state the cutover ends in: COMPLETE refuses it.
	t.Run("held then COMPLETE", func(t *testing.T) {
		cl := txn("app-held")
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cl.ProduceSync(ctx, records(held, "held", 1)...).FirstErr() }()
		wait.For(t, 30*time.Second, "the agent to hold the produce", func() string {
			if f.agent.HeldForTest() == 0 {
				return "nothing held"
			}
			return ""
		})
		routesMu.Lock()
		routes[3] = agent.Route{Topic: held, State: migration.Complete}
		table.Replace(slices.Clone(routes))
		routesMu.Unlock()
		if err := <-done; !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("a held transactional produce after COMPLETE: %v, want TOPIC_AUTHORIZATION_FAILED", err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatalf("aborting after the refusal: %v", err)
		}
	})

	// A client of transactions v1 adds a partition before producing to
	// it: AddPartitionsToTxn of a MIGRATING topic is answered
	// CONCURRENT_TRANSACTIONS, which franz-go retries until the cutover
	// ends; rolled back, the transaction commits on the source; COMPLETE,
	// the add is refused.
	for _, c := range []struct {
		topic string
		to    migration.State
		i     int
	}{{toProxy, migration.Proxy, 4}, {toDone, migration.Complete, 5}} {
		t.Run("transactions v1, MIGRATING then "+c.to.String(), func(t *testing.T) {
			var adds atomic.Int64
			cl := newClient(t, f.addr, kgo.TransactionalID("app-tv1-"+c.to.String()), kgo.TransactionTimeout(30*time.Second),
				kgo.RecordDeliveryTimeout(20*time.Second), kgo.WithHooks(countAdds{&adds}),
				kgo.MaxVersions(kversion.V3_8_0())) // EndTxn v4: transactions v1
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cl.ProduceSync(ctx, records(c.topic, "tv1", 3)...).FirstErr() }()
			wait.For(t, 30*time.Second, "the client to retry AddPartitionsToTxn", func() string {
				if n := adds.Load(); n < 3 {
					return fmt.Sprintf("%d sent", n)
				}
				return ""
			})
			routesMu.Lock()
			routes[c.i] = agent.Route{Topic: c.topic, State: c.to}
			table.Replace(slices.Clone(routes))
			routesMu.Unlock()
			err := <-done
			if c.to == migration.Complete {
				if !errors.Is(err, kerr.TopicAuthorizationFailed) {
					t.Fatalf("after COMPLETE: %v, want TOPIC_AUTHORIZATION_FAILED", err)
				}
				if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
					t.Fatalf("aborting after the refusal: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("after the rollback to PROXY: %v", err)
			}
			if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			if got := readCommitted(t, ctx, f.src.Bootstrap(), c.topic); len(got) != 3 {
				t.Fatalf("the source holds %v read_committed, want the transaction's three records", got)
			}
		})
	}

	t.Run("AddPartitionsToTxn", func(t *testing.T) {
		raw := newClient(t, f.addr)
		add := func(topics ...string) map[string]int16 {
			req := kmsg.NewPtrAddPartitionsToTxnRequest()
			req.SetVersion(3)
			req.TransactionalID, req.ProducerID, req.ProducerEpoch = "app-raw", 1, 0
			for _, tp := range topics {
				rt := kmsg.NewAddPartitionsToTxnRequestTopic()
				rt.Topic, rt.Partitions = tp, []int32{0, 1}
				req.Topics = append(req.Topics, rt)
			}
			resp, err := req.RequestWith(ctx, raw)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int16{}
			for _, rt := range resp.Topics {
				for _, rp := range rt.Partitions {
					if c, ok := out[rt.Topic]; ok && c != rp.ErrorCode {
						t.Errorf("%s: partitions answered %d and %d", rt.Topic, c, rp.ErrorCode)
					}
					out[rt.Topic] = rp.ErrorCode
				}
			}
			return out
		}
		codes := add(proxy, complete)
		if codes[complete] != kerr.TopicAuthorizationFailed.Code || codes[proxy] != kerr.OperationNotAttempted.Code {
			t.Errorf("AddPartitionsToTxn of a PROXY and a COMPLETE topic: %v, want %s TOPIC_AUTHORIZATION_FAILED, %s OPERATION_NOT_ATTEMPTED",
				codes, complete, proxy)
		}
		codes = add(proxy, migrating)
		if codes[migrating] != kerr.ConcurrentTransactions.Code || codes[proxy] != kerr.OperationNotAttempted.Code {
			t.Errorf("AddPartitionsToTxn of a PROXY and a MIGRATING topic: %v, want %s CONCURRENT_TRANSACTIONS, %s OPERATION_NOT_ATTEMPTED",
				codes, migrating, proxy)
		}
		if !strings.Contains(log.String(), "transactional_id=app-raw") {
			t.Errorf("no WARN names transactional id app-raw:\n%s", log.String())
		}
	})
}

// countAdds counts the AddPartitionsToTxn requests a client sent.
type countAdds struct{ n *atomic.Int64 }

func (c countAdds) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, _ kgo.BrokerE2E) {
	if key == kmsg.AddPartitionsToTxn.Int16() {
		c.n.Add(1)
	}
}

// readCommitted reads topic from bootstrap read_committed, directly, up to
// its end offsets, and returns the keys it holds.
func readCommitted(t *testing.T, ctx context.Context, bootstrap, topic string) map[string]bool {
	t.Helper()
	adm := kadm.NewClient(newClient(t, bootstrap))
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, bootstrap, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]bool{}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v (partitions left %v)", topic, err, left)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				got[string(r.Key)] = true
			}
			// The last stable offset: past the markers.
			if end, ok := left[p.Partition]; ok && p.HighWatermark >= end && p.LastStableOffset >= end {
				delete(left, p.Partition)
			}
		})
	}
	return got
}
