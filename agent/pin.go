package agent

import (
	"math"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent/internal/upstream"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// A client keeps several produce requests in flight on a broker connection
// (Java and librdkafka 5, franz-go 5 when idempotent), and an idempotent
// producer's in-flight batches of one partition carry consecutive
// sequence numbers. Talking to brokers directly, those requests all reach
// the broker the client took for leader when it sent them: when leadership
// moves, each of them fails alike and the client resends them in order.
// The agent resolves leaders per request, so a leader change it learns of
// between two pipelined requests (from another request's answer, or from
// another client's Metadata) would send the later one to the new leader
// while the earlier one is still at the old: the new leader sees a sequence
// gap and answers OUT_OF_ORDER_SEQUENCE_NUMBER (fatal for librdkafka when
// at the head of the line), and a non-idempotent producer's later batch is
// written ahead of the earlier one. test/e2e found it: through the agent,
// the Java producer retried OUT_OF_ORDER_SEQUENCE_NUMBER until its delivery
// timeout while kfake moved leaders; directly, never.
//
// So while a client connection has produce requests outstanding for a
// partition, its next ones for that partition go where those went, and
// the old leader turns them away as it would have directly. And once the
// connection was answered a retriable error for an idempotent batch,
// later batches of that producer session for the partition that the client
// sent before it read the answer (a higher base sequence, before the failed
// one is resent) are answered NOT_LEADER_OR_FOLLOWER too, without
// forwarding: directly they would have met the old leader as well, while
// the new leader would take them ahead of the failed batch.

// The same holds for the upstream connection, not only the broker: when
// the pooled connection a partition's outstanding requests went on dies,
// they are in doubt (written or not), and the agent answers them
// retriable. A later request of that partition sent on a fresh connection
// would reach the broker ahead of their resend: for an idempotent producer
// a sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER, fatal for librdkafka; after
// franz-go re-initialises, a duplicate of the batch that was written).
// Directly, a connection's death fails all of its requests alike, so the
// later ones are refused too, unsent, until the outstanding ones are
// answered (see onConn). The chaos suite found it with a destination
// paused and killed under the agent.

// pin is where a client connection's outstanding produce requests for one
// partition went.
type pin struct {
	up   *upstream.Cluster
	addr string
	conn *upstream.Conn // the pooled connection they went on
	n    int            // requests outstanding
}

// pins is one client connection's pins. Dispatch reads and adds; the
// response side releases.
type pins struct {
	mu   sync.Mutex
	m    map[tp]*pin
	gaps map[tp]gap
}

// gap is the first batch of a producer session the connection was told
// failed with a retriable error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS,
// a timeout...) and has not resent yet.
type gap struct {
	pid   int64
	epoch int16
	seq   int32
}

// batchSeq returns the producer id, epoch and base sequence of the first
// record batch in recs; ok is false for a batch without a producer id.
func batchSeq(recs []byte) (g gap, ok bool) {
	p, ok := recordbatch.ReadProducer(recs)
	if !ok {
		return gap{}, false
	}
	g = gap{pid: p.ID, epoch: p.Epoch, seq: p.BaseSeq}
	return g, g.pid >= 0
}

// dropAfterGap answers NOT_LEADER_OR_FOLLOWER (in codes) for the
// partitions whose batch follows a gap, and takes them out of the shards.
// A batch at or before the gap (the resend) or of another producer session
// closes the gap.
func (ps *pins) dropAfterGap(req *kmsg.ProduceRequest, shards []*shard, codes []int16) []*shard {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.gaps) == 0 {
		return shards
	}
	var drop map[int]bool
	i := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			k := tp{t.Topic, p.Partition}
			if g, ok := ps.gaps[k]; ok {
				b, idem := batchSeq(p.Records)
				if idem && b.pid == g.pid && b.epoch == g.epoch && seqAfter(b.seq, g.seq) {
					if codes[i] == 0 {
						if drop == nil {
							drop = map[int]bool{}
						}
						drop[i] = true
						codes[i] = kerr.NotLeaderForPartition.Code
					}
				} else {
					delete(ps.gaps, k)
				}
			}
			i++
		}
	}
	return withoutParts(shards, drop)
}

// noteGaps records a gap for each idempotent batch answered with a
// retriable error (results in the request's flattened order): not only
// NOT_LEADER_OR_FOLLOWER. A batch the source refused with, say,
// NOT_ENOUGH_REPLICAS while a later one is held through MIGRATING would
// otherwise let the later one open the destination's stream and be acked
// ahead of it.
//
// A batch after the gap answered success closes it: the broker takes an
// idempotent session's batches only in sequence order, so it holds the
// failed batch too (written, its answer late: past the forward deadline,
// say), and the client knows it. librdkafka then reports the failed
// batch's messages delivered ("implicitly acked", offset unknown) and never
// resends them: a gap left open would refuse every later batch of the
// session, which librdkafka retries until its message timeout
// (docs/reliability.md, finding 9).
func (ps *pins) noteGaps(req *kmsg.ProduceRequest, results []kmsg.ProduceResponseTopicPartition) {
	ps.noteOutcomes(req, func(i int) int16 { return results[i].ErrorCode }, true)
}

// noteRefused records a gap, at dispatch, for each batch the agent itself
// answers NOT_LEADER_OR_FOLLOWER without forwarding (codes in the request's
// flattened order): a topic MIGRATING in retriable mode, a hold that ran
// out, no producer id from the destination. Waiting for the response side
// would let the connection's next request, dispatched meanwhile, reach a
// cluster ahead of the refused batch: at the instant of COMPLETE, a later
// batch would open the destination's sequence stream and the refused one,
// resent, would come before its start.
func (ps *pins) noteRefused(req *kmsg.ProduceRequest, codes []int16) {
	for _, c := range codes {
		if c != 0 { // the usual request refuses nothing: no lock, no walk
			// A 0 here is "not refused yet", not an answer: it closes
			// nothing.
			ps.noteOutcomes(req, func(i int) int16 { return codes[i] }, false)
			return
		}
	}
}

// noteOutcomes walks req's batches with their codes (in the request's
// flattened order): a retriable code opens a gap at the batch unless an
// earlier batch of the same session has one; with answered, a success of
// a later batch of the gap's session closes the gap.
func (ps *pins) noteOutcomes(req *kmsg.ProduceRequest, code func(i int) int16, answered bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	i := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			c := code(i)
			i++
			if c == 0 && (!answered || len(ps.gaps) == 0) {
				continue
			}
			if c != 0 && !kerr.IsRetriable(kerr.ErrorForCode(c)) {
				continue
			}
			b, ok := batchSeq(p.Records)
			if !ok {
				continue
			}
			k := tp{t.Topic, p.Partition}
			g, had := ps.gaps[k]
			sameSession := had && g.pid == b.pid && g.epoch == b.epoch
			switch {
			case c == 0:
				if sameSession && seqAfter(b.seq, g.seq) {
					delete(ps.gaps, k)
				}
			case !sameSession || seqAfter(g.seq, b.seq):
				if ps.gaps == nil {
					ps.gaps = map[tp]gap{}
				}
				ps.gaps[k] = b
			}
		}
	}
}

// seqAfter reports whether producer sequence a comes after b. Kafka's
// sequences run from 0 to math.MaxInt32 and wrap to 0, so a batch just
// past the wrap comes after one just before it; a and b are taken to be
// less than 2^30 apart (a client has at most a few batches in flight).
func seqAfter(a, b int32) bool {
	d := (int64(a) - int64(b)) & math.MaxInt32
	return d != 0 && d < 1<<30
}

// addr returns the broker the connection's outstanding produce requests
// for p went to, if any went to up.
func (ps *pins) addr(up *upstream.Cluster, p tp) (string, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if pn := ps.m[p]; pn != nil && pn.up == up {
		return pn.addr, true
	}
	return "", false
}

// onConn sets, for each shard, the upstream connection it MUST go on: the
// one its partitions' outstanding requests went on. A shard some of whose
// partitions are outstanding on a connection that died (or on two) is
// refused: its parts get the retriable error in codes and it is left out.
func (ps *pins) onConn(shards []*shard, parts []tp, codes []int16) []*shard {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.m) == 0 {
		return shards
	}
	var drop map[int]bool
	for _, s := range shards {
		refuse := false
		for _, i := range s.idx {
			pn := ps.m[parts[i]]
			if pn == nil || pn.up != s.up || pn.addr != s.addr || pn.conn == nil {
				continue
			}
			if pn.conn.Dead() || (s.conn != nil && s.conn != pn.conn) {
				refuse = true
				break
			}
			s.conn = pn.conn
		}
		if !refuse {
			continue
		}
		s.conn = nil
		for _, i := range s.idx {
			if drop == nil {
				drop = map[int]bool{}
			}
			drop[i], codes[i] = true, kerr.NotLeaderForPartition.Code
		}
	}
	return withoutParts(shards, drop)
}

// hold records that the partitions of every shard sent without error are
// outstanding at its broker, and returns them for release.
func (ps *pins) hold(ss []sent, parts []tp) []heldPin {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []heldPin
	for _, s := range ss {
		if s.err != nil {
			continue
		}
		for _, i := range s.s.idx {
			p := parts[i]
			pn := ps.m[p]
			if pn == nil || pn.up != s.s.up || pn.addr != s.s.addr {
				// A new pin: none was outstanding, or the route moved the
				// topic to the other cluster (never pinned across).
				pn = &pin{up: s.s.up, addr: s.s.addr}
				if s.cl != nil {
					pn.conn = s.cl.Conn()
				}
				if ps.m == nil {
					ps.m = map[tp]*pin{}
				}
				ps.m[p] = pn
			}
			pn.n++
			out = append(out, heldPin{p, pn})
		}
	}
	return out
}

type heldPin struct {
	p  tp
	pn *pin
}

// release ends what hold returned: the request was answered or gave up.
func (ps *pins) release(held []heldPin) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, h := range held {
		h.pn.n--
		if h.pn.n == 0 && ps.m[h.p] == h.pn {
			delete(ps.m, h.p)
		}
	}
}
