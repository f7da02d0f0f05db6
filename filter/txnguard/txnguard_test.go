package txnguard_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/txnguard"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// table routes topics "s*" to the source, "d*" to the destination
// (COMPLETE) and "m*" nowhere (MIGRATING).
type table struct{}

func (table) Target(topic string) filter.Cluster {
	switch topic[0] {
	case 'd':
		return filter.Destination
	case 'm':
		return filter.Nowhere
	}
	return filter.Source
}

// batch is a v2 batch header, transactional or not.
func batch(transactional bool) []byte {
	b := make([]byte, recordbatch.HeaderLen)
	b[recordbatch.OffMagic] = 2
	recordbatch.SetProducer(b, recordbatch.Producer{ID: 7, Epoch: 0, BaseSeq: 0})
	if transactional {
		b[recordbatch.OffAttributes+1] |= byte(recordbatch.AttrTransactional)
	}
	return b
}

// produce is a produce of two partitions per topic, routed as route would
// (table), with txnID (none if "") and batches transactional or not.
func produce(txnID string, transactional bool, topics ...string) *filter.Exchange {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	if txnID != "" {
		req.TransactionID = &txnID
	}
	for _, t := range topics {
		rt := kmsg.ProduceRequestTopic{Topic: t}
		for p := range int32(2) {
			rt.Partitions = append(rt.Partitions, kmsg.ProduceRequestTopicPartition{Partition: p, Records: batch(transactional)})
		}
		req.Topics = append(req.Topics, rt)
	}
	x := &filter.Exchange{Req: req}
	for i := range x.Parts() {
		p := &x.Parts()[i]
		p.To = table{}.Target(p.Topic)
		if p.To == filter.Nowhere {
			p.Answer(7) // route's retriable answer, not this filter's
		}
	}
	return x
}

func addPartitions(txnID string, topics ...string) *filter.Exchange {
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.SetVersion(3)
	req.TransactionalID = txnID
	for _, t := range topics {
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic, rt.Partitions = t, []int32{0, 1}
		req.Topics = append(req.Topics, rt)
	}
	return &filter.Exchange{Req: req}
}

type guard struct {
	f       *txnguard.Factory
	log     *bytes.Buffer
	mu      sync.Mutex
	refused map[string]int
}

func newGuard(t *testing.T, remember int) *guard {
	t.Helper()
	g := &guard{log: &bytes.Buffer{}, refused: map[string]int{}}
	f, err := txnguard.New(txnguard.Config{Table: table{}, Remember: remember,
		Log: slog.New(slog.NewTextHandler(g.log, nil)),
		Refused: func(topic string) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.refused[topic]++
		}})
	if err != nil {
		t.Fatal(err)
	}
	g.f = f
	return g
}

func (g *guard) run(x *filter.Exchange) filter.Status {
	return g.f.New(filter.ConnInfo{}).(filter.RequestFilter).OnRequest(context.Background(), x)
}

// TestProduce: a transactional produce's partitions routed to the
// destination are refused TOPIC_AUTHORIZATION_FAILED, unsent; the source's
// go on, and an idempotent producer's destination partitions too.
func TestProduce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		txnID         string
		transactional bool
		topics        []string
		refused       []string // topics whose parts the filter answers
	}{
		{"transactional to PROXY", "app", true, []string{"s1"}, nil},
		{"transactional to COMPLETE", "app", true, []string{"d1"}, []string{"d1"}},
		{"transactional to PROXY and COMPLETE", "app", true, []string{"s1", "d1"}, []string{"d1"}},
		{"transactional to MIGRATING: route's answer stays", "app", true, []string{"m1"}, nil},
		{"idempotent to COMPLETE", "", false, []string{"d1"}, nil},
		{"a transactional batch without an id", "", true, []string{"d1"}, []string{"d1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g := newGuard(t, 0)
			x := produce(c.txnID, c.transactional, c.topics...)
			if st := g.run(x); st != filter.Continue {
				t.Fatalf("status %v, want Continue (a produce is answered per partition)", st)
			}
			for _, p := range x.Parts() {
				want := strings.Contains(strings.Join(c.refused, ","), p.Topic)
				got := p.Answered && p.Code == txnguard.Refused
				if got != want {
					t.Errorf("%s/%d: answered %v code %d, want refused %v", p.Topic, p.Partition, p.Answered, p.Code, want)
				}
				if p.To == filter.Nowhere && p.Code != 7 {
					t.Errorf("%s/%d: route's answer replaced by %d", p.Topic, p.Partition, p.Code)
				}
			}
			for _, tp := range c.refused {
				if g.refused[tp] != 1 {
					t.Errorf("topic %s counted refused %d times, want once per request", tp, g.refused[tp])
				}
			}
		})
	}
}

// TestAddPartitions: AddPartitionsToTxn naming a COMPLETE topic is answered
// as Kafka answers a request it refuses in part (the refused partitions
// TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED), one
// naming a MIGRATING topic CONCURRENT_TRANSACTIONS (retried), and one of
// source topics only goes on to the coordinator.
func TestAddPartitions(t *testing.T) {
	t.Parallel()
	R, L, N := txnguard.Refused, txnguard.Later, txnguard.NotAttempted
	cases := []struct {
		name   string
		topics []string
		want   map[string]int16 // nil: forwarded
	}{
		{"source only", []string{"s1", "s2"}, nil},
		{"complete only", []string{"d1"}, map[string]int16{"d1": R}},
		{"complete and source", []string{"s1", "d1"}, map[string]int16{"s1": N, "d1": R}},
		{"migrating and source", []string{"s1", "m1"}, map[string]int16{"s1": N, "m1": L}},
		{"complete, migrating and source", []string{"s1", "m1", "d1"}, map[string]int16{"s1": N, "m1": N, "d1": R}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g := newGuard(t, 0)
			x := addPartitions("app", c.topics...)
			st := g.run(x)
			if c.want == nil {
				if st != filter.Continue || x.Resp != nil {
					t.Fatalf("status %v, answer %v: want it forwarded", st, x.Resp)
				}
				return
			}
			if st != filter.StopIteration {
				t.Fatalf("status %v, want StopIteration (answered)", st)
			}
			resp := x.Resp.(*kmsg.AddPartitionsToTxnResponse)
			if len(resp.Topics) != len(c.topics) {
				t.Fatalf("answer names %d topics, want %d", len(resp.Topics), len(c.topics))
			}
			for i, rt := range resp.Topics {
				if rt.Topic != c.topics[i] || len(rt.Partitions) != 2 {
					t.Fatalf("answer topic %d: %+v, want %s with its two partitions", i, rt, c.topics[i])
				}
				for _, rp := range rt.Partitions {
					if rp.ErrorCode != c.want[rt.Topic] {
						t.Errorf("%s/%d: code %d, want %d", rt.Topic, rp.Partition, rp.ErrorCode, c.want[rt.Topic])
					}
				}
			}
			warned := strings.Contains(g.log.String(), "level=WARN")
			if complete := c.want["d1"] == R; warned != complete {
				t.Errorf("WARN said %v, want %v (only a refusal is warned about): %s", warned, complete, g.log)
			}
		})
	}
}

// TestWarnsOncePerTransactionalID: the first refusal of each transactional
// id is said at WARN, naming it and what to do; later ones are not, until
// the id was forgotten (Remember).
func TestWarnsOncePerTransactionalID(t *testing.T) {
	t.Parallel()
	g := newGuard(t, 2)
	for _, id := range []string{"a", "a", "b", "a", "b"} {
		g.run(produce(id, true, "d1"))
	}
	g.run(addPartitions("a", "d1"))
	if n := strings.Count(g.log.String(), "level=WARN"); n != 2 {
		t.Fatalf("%d WARN lines, want one per transactional id (a, b):\n%s", n, g.log)
	}
	for _, want := range []string{"transactional_id=a", "transactional_id=b", "bootstrap.servers set to the destination's brokers",
		"keep the topic on the source", "topics=[d1]"} {
		if !strings.Contains(g.log.String(), want) {
			t.Errorf("the WARN lines do not say %q:\n%s", want, g.log)
		}
	}
	g.run(produce("c", true, "d1")) // forgets a (remembers two)
	g.run(produce("a", true, "d1"))
	if n := strings.Count(g.log.String(), "transactional_id=a"); n != 2 {
		t.Fatalf("a warned %d times, want again once forgotten:\n%s", n, g.log)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []txnguard.Config{{}, {Table: table{}, Remember: -1}} {
		if _, err := txnguard.New(cfg); !errors.Is(err, txnguard.ErrBadConfig) {
			t.Errorf("New(%+v): %v, want ErrBadConfig", cfg, err)
		}
	}
}
