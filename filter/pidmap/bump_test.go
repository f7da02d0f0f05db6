package pidmap_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// recordsBatch is an idempotent batch of producer pid at epoch and base
// sequence seq holding one record with value, first written at ts (Unix
// ms): what a client resends byte for byte but for the producer fields
// and the CRC.
func recordsBatch(pid int64, epoch int16, seq int32, value string, ts int64) []byte {
	var rec []byte
	rec = append(rec, 0)               // attributes
	rec = binary.AppendVarint(rec, 0)  // timestamp delta
	rec = binary.AppendVarint(rec, 0)  // offset delta
	rec = binary.AppendVarint(rec, -1) // no key
	rec = binary.AppendVarint(rec, int64(len(value)))
	rec = append(rec, value...)
	rec = binary.AppendVarint(rec, 0) // headers
	b := make([]byte, recordbatch.HeaderLen, recordbatch.HeaderLen+len(rec)+2)
	b[recordbatch.OffMagic] = 2
	binary.BigEndian.PutUint64(b[recordbatch.OffBaseTime:], uint64(ts))
	binary.BigEndian.PutUint64(b[recordbatch.OffBaseTime+8:], uint64(ts))
	binary.BigEndian.PutUint32(b[recordbatch.OffNumRecords:], 1)
	b = binary.AppendVarint(b, int64(len(rec)))
	b = append(b, rec...)
	binary.BigEndian.PutUint32(b[recordbatch.OffLength:], uint32(len(b)-recordbatch.LogOverhead))
	recordbatch.SetProducer(b, recordbatch.Producer{ID: pid, Epoch: epoch, BaseSeq: seq})
	recordbatch.SetCRC(b)
	return b
}

// via is where a part was sent.
type via filter.Cluster

func (v via) Cluster() filter.Cluster { return filter.Cluster(v) }
func (via) Dead() bool                { return true }

// TestResendUnderANewEpoch is finding 16 of docs/reliability.md and its
// sibling: a client whose batch went out without an answer (its
// connection died) bumps its epoch and sends the same records again at
// sequence 0 of the new epoch. When the cluster the first send went to
// holds it, the resend is answered with its offset there instead of being
// written a second time under a session no cluster can dedupe.
func TestResendUnderANewEpoch(t *testing.T) {
	t.Parallel()
	const ts = 1764979200000
	// Producer 7's first batch toward the destination is mapped to
	// destination producer 500 at its sequence 0.
	onDst := pidmap.Batch{Topic: "t", Partition: 0, ProducerID: 500, Epoch: 0, Seq: 0, Records: 1}
	onSrc := pidmap.Batch{Topic: "t", Partition: 0, ProducerID: 7, Epoch: 0, Seq: 10, Records: 1}
	for _, tc := range []struct {
		name string
		// first is where the batch at epoch 0, sequence 10, went.
		first filter.Cluster
		// held: the cluster it went to holds it, at offset 272.
		held bool
		// resend is the value the client sends under epoch 1.
		resend string
		// want: the resend is answered at 272, not sent.
		want bool
	}{
		{"destination holds it", filter.Destination, true, "a", true},
		{"source holds it, topic now COMPLETE", filter.Source, true, "a", true},
		{"destination does not hold it", filter.Destination, false, "a", false},
		{"source does not hold it", filter.Source, false, "a", false},
		{"other records under the new epoch", filter.Destination, true, "b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src, dst := &source{at: map[pidmap.Batch]int64{}}, &source{at: map[pidmap.Batch]int64{}}
			if tc.held {
				src.at[onSrc], dst.at[onDst] = 272, 272
			}
			var a alloc
			f, err := pidmap.New(pidmap.Config{Allocator: &a, Source: src, Destination: dst})
			if err != nil {
				t.Fatal(err)
			}
			c := f.New(filter.ConnInfo{})
			req, resp := c.(filter.RequestFilter), c.(filter.ResponseFilter)

			x := exchange(tc.first, false, recordsBatch(7, 0, 10, "a", ts))
			req.OnRequest(ctx, x)
			p := &x.Parts()[0]
			if tc.first == filter.Destination {
				if got := sent(t, *p); got != (recordbatch.Producer{ID: 500, BaseSeq: 0}) {
					t.Fatalf("first send goes as %+v", got)
				}
			}
			p.Via, p.Uncertain = via(tc.first), true // its connection died before the answer
			resp.OnResponse(ctx, x)

			// The bump: epoch 1 renumbers the unacknowledged batch from 0.
			x = exchange(filter.Destination, false, recordsBatch(7, 1, 0, tc.resend, ts))
			req.OnRequest(ctx, x)
			p = &x.Parts()[0]
			if got := p.Answered && p.Code == 0 && p.Offset == 272 && p.Send == nil; got != tc.want {
				t.Fatalf("resend: answered %v code %d offset %d sent %v; want answered at 272: %v",
					p.Answered, p.Code, p.Offset, p.Send != nil, tc.want)
			}
			next := int64(500) // the new session's destination producer
			if tc.first == filter.Destination {
				next = 501
			}
			if !tc.want {
				if got := sent(t, *p); got.ID != next || got.BaseSeq != 0 {
					t.Fatalf("resend written as %+v, want a new destination producer %d at 0", got, next)
				}
				return
			}
			// Answered again on a second retry (the answer may be lost too),
			// and the new session's stream starts with its next batch.
			x = exchange(filter.Destination, false, recordsBatch(7, 1, 0, tc.resend, ts))
			req.OnRequest(ctx, x)
			if p := x.Parts()[0]; !p.Answered || p.Offset != 272 {
				t.Fatalf("second retry of the resend: answered %v offset %d", p.Answered, p.Offset)
			}
			x = exchange(filter.Destination, false, recordsBatch(7, 1, 1, "c", ts+1))
			req.OnRequest(ctx, x)
			if got := sent(t, x.Parts()[0]); x.Parts()[0].Answered || got.ID != next || got.BaseSeq != 0 {
				t.Fatalf("next batch of the new epoch: %+v answered %v, want producer %d at 0", got, x.Parts()[0].Answered, next)
			}
		})
	}
}

// TestRetryOfAnUncertainDestinationWriteKeepsItsMapping: a retry under the
// same epoch goes to the destination under the same producer and sequence
// (the destination dedupes it), without a search.
func TestRetryOfAnUncertainDestinationWriteKeepsItsMapping(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := &source{at: map[pidmap.Batch]int64{}}
	var a alloc
	f, err := pidmap.New(pidmap.Config{Allocator: &a, Destination: dst})
	if err != nil {
		t.Fatal(err)
	}
	c := f.New(filter.ConnInfo{})
	req, resp := c.(filter.RequestFilter), c.(filter.ResponseFilter)
	x := exchange(filter.Destination, false, recordsBatch(7, 0, 10, "a", 1))
	req.OnRequest(ctx, x)
	x.Parts()[0].Via, x.Parts()[0].Uncertain = via(filter.Destination), true
	resp.OnResponse(ctx, x)
	x = exchange(filter.Destination, false, recordsBatch(7, 0, 10, "a", 1))
	req.OnRequest(ctx, x)
	if got := sent(t, x.Parts()[0]); x.Parts()[0].Answered || got != (recordbatch.Producer{ID: 500, BaseSeq: 0}) {
		t.Fatalf("retry: %+v answered %v, want producer 500 at 0", got, x.Parts()[0].Answered)
	}
	if dst.searches != 0 {
		t.Fatalf("%d searches of the destination, want 0", dst.searches)
	}
}

// keep is a Journal that keeps everything in memory.
type keep struct {
	ms []pidmap.Mapping
	us []pidmap.Uncertain
}

func (k *keep) Record(m pidmap.Mapping) error            { k.ms = append(k.ms, m); return nil }
func (k *keep) RecordUncertain(u pidmap.Uncertain) error { k.us = append(k.us, u); return nil }

// TestResendThroughARestartedAgent: the uncertain batch is journaled before
// the client's answer, so the agent started in place of the one that sent
// it recognises the client's resend under a new epoch.
func TestResendThroughARestartedAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := &source{at: map[pidmap.Batch]int64{{Topic: "t", Partition: 0, ProducerID: 500, Seq: 0, Records: 1}: 272}}
	var a alloc
	j := &keep{}
	f, err := pidmap.New(pidmap.Config{Allocator: &a, Destination: dst, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	c := f.New(filter.ConnInfo{})
	x := exchange(filter.Destination, false, recordsBatch(7, 0, 10, "a", 1))
	c.(filter.RequestFilter).OnRequest(ctx, x)
	x.Parts()[0].Via, x.Parts()[0].Uncertain = via(filter.Destination), true
	c.(filter.ResponseFilter).OnResponse(ctx, x)
	if len(j.us) != 1 {
		t.Fatalf("%d uncertain batches journaled, want 1", len(j.us))
	}

	restarted, err := pidmap.New(pidmap.Config{Allocator: &a, Destination: dst, Journal: j,
		Restored: j.ms, RestoredUncertain: j.us})
	if err != nil {
		t.Fatal(err)
	}
	x = exchange(filter.Destination, false, recordsBatch(7, 1, 0, "a", 1))
	restarted.New(filter.ConnInfo{}).(filter.RequestFilter).OnRequest(ctx, x)
	if p := x.Parts()[0]; !p.Answered || p.Offset != 272 || p.Send != nil {
		t.Fatalf("resend through the restarted agent: answered %v offset %d sent %v, want answered at 272",
			p.Answered, p.Offset, p.Send != nil)
	}
}
