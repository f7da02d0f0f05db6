package clients

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// kcat's delivery reports name a partition and an offset, never the
// record, and they do not come in send order, not even within a partition
// and with max.in.flight.requests.per.connection=1, once a request fails
// retriably: librdkafka builds a partition's next ProduceRequest while the
// one before is in flight (queue.buffering.backpressure.threshold=1 keeps
// one built request waiting), and when the one in flight fails its records
// go back to the partition's queue while the request already built goes
// out first. The retried records are then written, and reported, after
// later ones (and, when the failed write did land, are in the log twice).
// Directly against Kafka a request timeout does it (REQUEST_TIMED_OUT while
// a follower lags), through an agent also its forward deadline.
//
// So the driver runs kcat with librdkafka's "msg" and "protocol" debug
// contexts and follows each partition's messages through them. librdkafka
// numbers a partition's messages in the order they are produced to it,
// which is the order the driver computed for the partition; every request
// takes the lowest-numbered messages that are neither in a request nor
// delivered (a partition's queue is kept sorted, and a retry puts its
// messages back at their place); and it logs, on the thread of the broker
// connection, each request built ("Produce MessageSet with N message(s)"),
// each one sent ("Sent ProduceRequest", in build order), and each outcome
// ("MessageSet with N message(s) ... delivered" or "... encountered error"),
// in request order except for a built request purged unsent ("Local: Retry
// operation"). A delivered batch's reports follow its outcome line (kcat
// prints them from its main thread once librdkafka queued them, after the
// line). The idempotent producer's lines carry each batch's first msgid
// (MsgId), so for it the driver reads that instead.

var (
	// A librdkafka debug line of a broker thread: facility, the broker's
	// log name ("127.0.0.1:9092/1") and the message.
	kcatBrokerDebug = regexp.MustCompile(`^%7\|[^|]*\|([A-Z]+)\|[^|]*\| \[thrd:[^\]]*\]: (\S+): (.*)$`)
	kcatBuilt       = regexp.MustCompile(`^(\S+) \[(\d+)\]: Produce MessageSet with (\d+) message\(s\) \(`)
	kcatSent        = regexp.MustCompile(`^Sent ProduceRequest \(`)
	kcatOutcome     = regexp.MustCompile(`^(\S+) \[(\d+)\]: MessageSet with (\d+) message\(s\) \(MsgId (\d+), BaseSeq -?\d+\) (?:(delivered)|encountered error: (.*) \(actions ([^)]*)\)(?: \[NOT LEADER\])?)$`)
	// An idempotent producer's messages acked by a later batch's success
	// (their own attempt's answer was lost): reported without an offset
	// and without a broker.
	kcatImplicitAck = regexp.MustCompile(`^(\S+) \[(\d+)\] (\d+) message\(s\) implicitly acked by subsequent batch success \(msgids (\d+)\.\.(\d+),`)
	// "% Message delivered to partition 2 (offset 36) on broker 1"
	kcatDelivered = regexp.MustCompile(`^% Message delivered to partition (-?\d+) \(offset (-?\d+)\) on broker (-?\d+)`)
	kcatFailed    = regexp.MustCompile(`^% Delivery failed for message: (.*)$`)
	// kcatDebug is any librdkafka debug line: not kept for error messages.
	kcatDebug = regexp.MustCompile(`^%7\|`)
)

// kcatRetryPurged is the error of a built request purged before it was
// sent (its partition left the broker).
const kcatRetryPurged = "Local: Retry operation"

// kcatStream is one broker thread's traffic of one partition.
type kcatStream struct {
	partition int32
	broker    string // node id; "-1" for implicitly acked messages
}

// kcatRequest is a built ProduceRequest without an outcome yet.
type kcatRequest struct {
	msgs []int // indexes into the partition's queue, ascending
	sent bool
}

// kcatBatch is a delivered batch whose reports are due.
type kcatBatch struct {
	msgs []int
	done int   // reports seen
	base int64 // offset of its first report
}

// kcatPart is which messages of a partition librdkafka may put in its next
// request: the ones given back by failed requests (ascending, all below
// next), then next and every later one.
type kcatPart struct {
	back []int
	next int
}

// take returns the n lowest messages that may go in a request.
func (pt *kcatPart) take(n int) []int {
	k := min(n, len(pt.back))
	out := append([]int(nil), pt.back[:k]...)
	pt.back = pt.back[k:]
	for len(out) < n {
		out = append(out, pt.next)
		pt.next++
	}
	return out
}

// giveBack returns a failed request's messages, which librdkafka retries.
func (pt *kcatPart) giveBack(msgs []int) {
	merged := make([]int, 0, len(pt.back)+len(msgs))
	i, j := 0, 0
	for i < len(pt.back) || j < len(msgs) {
		if j == len(msgs) || (i < len(pt.back) && pt.back[i] < msgs[j]) {
			merged = append(merged, pt.back[i])
			i++
		} else {
			merged = append(merged, msgs[j])
			j++
		}
	}
	pt.back = merged
}

// kcatReports maps kcat's stderr to records.
type kcatReports struct {
	topic      string
	idempotent bool
	// queues holds, per partition, the records sent there in send order:
	// librdkafka's message i of the partition (msgid i+1) is queues[p][i].
	queues      map[int32][]int
	parts       map[int32]*kcatPart
	unsent      map[string][]*kcatRequest // per broker, in build order
	outstanding map[kcatStream][]*kcatRequest
	delivered   map[kcatStream][]*kcatBatch
	reported    map[int32][]bool
	err         error // the first inconsistency; nothing is mapped after it
}

func newKcatReports(topic string, idempotent bool, queues map[int32][]int) *kcatReports {
	r := &kcatReports{
		topic: topic, idempotent: idempotent, queues: queues,
		parts: map[int32]*kcatPart{}, unsent: map[string][]*kcatRequest{},
		outstanding: map[kcatStream][]*kcatRequest{}, delivered: map[kcatStream][]*kcatBatch{},
		reported: map[int32][]bool{},
	}
	for p, q := range queues {
		r.reported[p] = make([]bool, len(q))
	}
	return r
}

func (r *kcatReports) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *kcatReports) part(p int32) *kcatPart {
	pt := r.parts[p]
	if pt == nil {
		pt = &kcatPart{}
		r.parts[p] = pt
	}
	return pt
}

// span returns the messages first-1, ..., first-1+n-1 (msgids first...).
func span(first int64, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = int(first) - 1 + i
	}
	return out
}

// line takes one stderr line of kcat. It calls ok for a delivery report it
// mapped to record seq, and failed for a failure report (kcat does not say
// of which record). It reports whether the line was kcat's or librdkafka's
// bookkeeping (not worth keeping for an error message).
func (r *kcatReports) line(text string, ok func(seq int, p int32, off int64), failed func(msg string)) bool {
	if m := kcatFailed.FindStringSubmatch(text); m != nil {
		failed(m[1])
		return true
	}
	if m := kcatDelivered.FindStringSubmatch(text); m != nil {
		r.report(atoi32(m[1]), atoi64(m[2]), m[3], ok)
		return true
	}
	m := kcatBrokerDebug.FindStringSubmatch(text)
	if m == nil {
		return kcatDebug.MatchString(text)
	}
	if r.err != nil {
		return true
	}
	fac, broker, msg := m[1], m[2][strings.LastIndexByte(m[2], '/')+1:], m[3]
	switch fac {
	case "PRODUCE":
		if m := kcatBuilt.FindStringSubmatch(msg); m != nil && m[1] == r.topic && !r.idempotent {
			p := atoi32(m[2])
			req := &kcatRequest{msgs: r.part(p).take(atoi(m[3]))}
			r.unsent[broker] = append(r.unsent[broker], req)
			s := kcatStream{p, broker}
			r.outstanding[s] = append(r.outstanding[s], req)
		}
	case "SEND":
		if kcatSent.MatchString(msg) && !r.idempotent {
			q := r.unsent[broker]
			if len(q) == 0 {
				r.fail("kcat sent a produce request to broker %s that it never built", broker)
				return true
			}
			q[0].sent = true
			r.unsent[broker] = q[1:]
		}
	case "MSGSET":
		if m := kcatOutcome.FindStringSubmatch(msg); m != nil && m[1] == r.topic {
			r.outcome(kcatStream{atoi32(m[2]), broker}, atoi(m[3]), atoi64(m[4]), m[5] != "", m[6], m[7])
		}
	case "IMPLICITACK":
		if m := kcatImplicitAck.FindStringSubmatch(msg); m != nil && m[1] == r.topic {
			p, n, first, last := atoi32(m[2]), atoi(m[3]), atoi64(m[4]), atoi64(m[5])
			if last-first+1 != int64(n) {
				r.fail("kcat implicitly acked %d messages of partition %d as msgids %d..%d", n, p, first, last)
				return true
			}
			s := kcatStream{p, "-1"}
			r.delivered[s] = append(r.delivered[s], &kcatBatch{msgs: span(first, n)})
		}
	}
	return true
}

// outcome takes a request's outcome on stream s: n messages, the first
// one's msgid (idempotent producer only, else 0), delivered or failed with
// errStr and librdkafka's actions.
func (r *kcatReports) outcome(s kcatStream, n int, msgid int64, delivered bool, errStr, actions string) {
	if r.idempotent {
		if delivered {
			r.delivered[s] = append(r.delivered[s], &kcatBatch{msgs: span(msgid, n)})
		}
		return
	}
	q := r.outstanding[s]
	i := 0
	if errStr == kcatRetryPurged {
		for i < len(q) && q[i].sent {
			i++
		}
	}
	if i >= len(q) {
		r.fail("kcat had an outcome for %d messages of partition %d from broker %s with no such request outstanding", n, s.partition, s.broker)
		return
	}
	req := q[i]
	if len(req.msgs) != n {
		r.fail("kcat had an outcome for %d messages of partition %d from broker %s where its request held %d", n, s.partition, s.broker, len(req.msgs))
		return
	}
	r.outstanding[s] = append(q[:i:i], q[i+1:]...)
	if !req.sent {
		u := r.unsent[s.broker]
		for j := range u {
			if u[j] == req {
				r.unsent[s.broker] = append(u[:j:j], u[j+1:]...)
				break
			}
		}
	}
	switch {
	case delivered:
		r.delivered[s] = append(r.delivered[s], &kcatBatch{msgs: req.msgs})
	case strings.Contains(actions, "Retry") || strings.Contains(actions, "Refresh"):
		r.part(s.partition).giveBack(req.msgs)
	}
	// Otherwise they failed for good: their failure reports follow.
}

// report maps a delivery report of partition p at offset off from broker.
func (r *kcatReports) report(p int32, off int64, broker string, ok func(seq int, p int32, off int64)) {
	if r.err != nil {
		return
	}
	s := kcatStream{p, broker}
	q := r.delivered[s]
	if len(q) == 0 {
		r.fail("kcat reported a delivery to partition %d (offset %d, broker %s) that no delivered batch accounts for", p, off, broker)
		return
	}
	b := q[0]
	switch {
	case b.done == 0:
		b.base = off
	case broker != "-1" && off != b.base+int64(b.done):
		r.fail("kcat reported offset %d on partition %d for message %d of a batch that starts at offset %d", off, p, b.done, b.base)
		return
	}
	i := b.msgs[b.done]
	if i < 0 || i >= len(r.queues[p]) {
		r.fail("kcat reported message %d of partition %d (offset %d), beyond the %d records the driver sent there", i+1, p, off, len(r.queues[p]))
		return
	}
	if r.reported[p][i] {
		r.fail("kcat reported message %d of partition %d twice (again at offset %d)", i+1, p, off)
		return
	}
	r.reported[p][i] = true
	if b.done++; b.done == len(b.msgs) {
		r.delivered[s] = q[1:]
	}
	ok(r.queues[p][i], p, off)
}

// unreported returns an error when a delivered batch is still owed
// reports (kcat exited without printing them all).
func (r *kcatReports) unreported() error {
	for s, q := range r.delivered {
		for _, b := range q {
			return fmt.Errorf("kcat delivered %d messages of partition %d from broker %s but reported only %d", len(b.msgs), s.partition, s.broker, b.done)
		}
	}
	return nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func atoi32(s string) int32 { n, _ := strconv.ParseInt(s, 10, 32); return int32(n) }

func atoi64(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
