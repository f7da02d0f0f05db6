package shadow

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/replicator"
)

// judgingJob is a job watching topic "t" partition 0 from offset 0, with
// the default lease and F; f's leases are the agents'.
func judgingJob(t *testing.T, f *fakes, began time.Time) *Job {
	t.Helper()
	j := newTestJob(t, f, 0)
	w := &proxyWatch{parts: map[int32]*attribution{}, ready: true, began: began}
	a := w.part(0)
	a.start = 0
	j.byp.proxy["t"] = w
	return j
}

func bypassed(j *Job) (string, bool) {
	l, ok := j.byp.last["t"]
	return l.what, ok
}

// TestClockStepKeepsUnknownSpansCovered: an agent whose clock is 30 s
// behind steps it by a second (the bounds on its clock start over): the
// unknown span its next heartbeat carries is still placed by that
// heartbeat's own bound, and its acks=0 write is not a forgotten producer.
func TestClockStepKeepsUnknownSpansCovered(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(10_000, 0) // control plane's clock
	f := &fakes{leases: []Lease{{Node: "pod", ExpiresAt: t0.Add(time.Hour)}}}
	j := judgingJob(t, f, t0)
	const ow = 5 * time.Millisecond
	skew := 30 * time.Second // agent clock = cp clock - skew
	ag := func(cpT time.Time) *timestamppb.Timestamp { return timestamppb.New(cpT.Add(-skew)) }
	var srv time.Time
	var got *timestamppb.Timestamp
	hb := func(cpSent time.Time, topics []*batonv1.TopicDrain) {
		req := &batonv1.HeartbeatRequest{NodeId: "pod", Incarnation: 1, SentAt: ag(cpSent), Topics: topics}
		if !srv.IsZero() {
			req.LastServerTime, req.LastAnsweredAt = timestamppb.New(srv), got
		}
		j.noteWrites(cpSent.Add(ow), req, time.Time{})
		srv, got = cpSent.Add(ow), ag(cpSent.Add(2*ow))
	}
	at := t0
	for range 5 {
		hb(at, nil)
		at = at.Add(1700 * time.Millisecond)
	}
	// NTP steps the agent's clock back by 1 s (still 31 s behind)
	// between the last answer and the next heartbeat.
	skew = 31 * time.Second
	hb(at, nil)
	at = at.Add(1700 * time.Millisecond)
	// The agent forwards an acks=0 write at W (cp clock), reported as an
	// unknown span in the next heartbeat; that heartbeat resets the bounds.
	W := at.Add(-time.Second)
	hb(at, []*batonv1.TopicDrain{{Topic: "t", Writes: []*batonv1.PartitionWrites{{Partition: 0,
		UnknownFrom: ag(W), UnknownUntil: ag(W)}}}})
	t.Logf("unknown spans on the control plane: %v (the write was at %v)", j.byp.proxy["t"].parts[0].unknown, W)
	// S appended it at W+10ms; the replicator saw it at W+250ms.
	j.NoteSourceRead(replicator.SourceRead{Topic: "t", Partition: 0, BaseOffset: 0, End: 1, ProducerID: -1,
		After: W, Seen: W.Add(250 * time.Millisecond)})
	for range 5 {
		at = at.Add(1700 * time.Millisecond)
		hb(at, nil)
	}
	j.judge(at, nil)
	if what, ok := bypassed(j); ok {
		t.Errorf("the agent's own acks=0 write reported as a forgotten producer: %s", what)
	}
}

// TestReplacedWriterOutlivesALaggingCopy: a copy 15 minutes behind reads a
// killed process's unreported write: the replaced process is still a
// writer then, so the write is unattributable, not a forgotten producer.
func TestReplacedWriterOutlivesALaggingCopy(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(10_000, 0)
	f := &fakes{}
	j := judgingJob(t, f, t0)
	const ow = 5 * time.Millisecond
	var srv time.Time
	var got *timestamppb.Timestamp
	hb := func(inc uint64, sent time.Time, prev time.Time) {
		req := &batonv1.HeartbeatRequest{NodeId: "pod", Incarnation: inc, SentAt: timestamppb.New(sent)}
		if !srv.IsZero() {
			req.LastServerTime, req.LastAnsweredAt = timestamppb.New(srv), timestamppb.New(sent.Add(-time.Second))
		}
		j.noteWrites(sent.Add(ow), req, prev)
		srv, got = sent.Add(ow), timestamppb.New(sent.Add(2*ow))
		_ = got
	}
	// Process 1 reports up to t0+1s, then writes at t0+1.5s and is killed.
	hb(1, t0, time.Time{})
	hb(1, t0.Add(time.Second), time.Time{})
	expires1 := t0.Add(6 * time.Second)
	// Process 2 takes the node id.
	srv = time.Time{}
	hb(2, t0.Add(3*time.Second), expires1)
	now := t0.Add(15 * time.Minute)
	hb(2, now.Add(-3*time.Second), now.Add(-3*time.Second).Add(5*time.Second))
	hb(2, now.Add(-time.Second), now.Add(2*time.Second))
	f.leases = []Lease{{Node: "pod", ExpiresAt: now.Add(4 * time.Second)}}
	// The replicator, 15 min behind, reads process 1's write now; its lag
	// samples say it was appended between t0+1.4s and t0+1.6s.
	j.NoteSourceRead(replicator.SourceRead{Topic: "t", Partition: 0, BaseOffset: 0, End: 5, ProducerID: 42,
		After: t0.Add(1400 * time.Millisecond), Seen: t0.Add(1600 * time.Millisecond), At: now})
	j.judge(now, nil)
	if what, ok := bypassed(j); ok {
		t.Errorf("a killed process's unreported write judged a forgotten producer: %s", what)
	}
}
