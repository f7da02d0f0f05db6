package route

import (
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

func TestSeqAfter(t *testing.T) {
	t.Parallel()
	cases := []struct {
		a, b int32
		want bool
	}{
		{1, 0, true},
		{0, 1, false},
		{5, 5, false},
		{0, math.MaxInt32, true}, // just past the wrap
		{2, math.MaxInt32 - 1, true},
		{math.MaxInt32, 0, false},
		{math.MaxInt32 - 1, 2, false},
	}
	for _, c := range cases {
		if got := seqAfter(c.a, c.b); got != c.want {
			t.Errorf("seqAfter(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// header is the header of an idempotent batch of producer 7, epoch 0, at
// base sequence seq: all the gap bookkeeping reads.
func header(seq int32) []byte {
	b := make([]byte, recordbatch.HeaderLen)
	b[recordbatch.OffMagic] = 2
	recordbatch.SetProducer(b, recordbatch.Producer{ID: 7, Epoch: 0, BaseSeq: seq})
	return b
}

// TestGapBookkeeping follows one partition's gap through the outcomes that
// open, keep and close it, including a session whose sequence wraps, and
// after any retriable error (not only NOT_LEADER_OR_FOLLOWER).
func TestGapBookkeeping(t *testing.T) {
	t.Parallel()
	retry := kerr.NotLeaderForPartition.Code
	type step struct {
		seq     int32
		refused bool  // answered at dispatch, else by the broker
		code    int16 // the answer
	}
	cases := []struct {
		name    string
		steps   []step
		probe   int32 // a later batch, sent after the steps
		wantGap bool  // the probe is refused: a gap is open before it
	}{
		{"a retriable answer opens a gap", []step{{seq: 10, code: retry}}, 11, true},
		{"NOT_ENOUGH_REPLICAS opens one", []step{{seq: 10, code: kerr.NotEnoughReplicas.Code}}, 11, true},
		{"REQUEST_TIMED_OUT opens one", []step{{seq: 10, code: kerr.RequestTimedOut.Code}}, 11, true},
		{"a refusal at dispatch opens one", []step{{seq: 10, refused: true, code: retry}}, 11, true},
		{"a later success closes it (finding 9)", []step{{seq: 10, code: retry}, {seq: 11}}, 12, false},
		{"no refusal at dispatch is no answer", []step{{seq: 10, code: retry}, {seq: 11, refused: true}}, 12, true},
		{"an earlier batch's success keeps it", []step{{seq: 10, code: retry}, {seq: 9}}, 11, true},
		{"a later gap does not move it", []step{{seq: 10, code: retry}, {seq: 12, code: retry}}, 11, true},
		{"a gap across the wrap", []step{{seq: math.MaxInt32, code: retry}}, 0, true},
		{"closed across the wrap", []step{{seq: math.MaxInt32, code: retry}, {seq: 0}}, 1, false},
		{"a fatal answer opens none", []step{{seq: 10, code: kerr.InvalidRecord.Code}}, 11, false},
		{"the probe is the resend", []step{{seq: 10, code: retry}}, 10, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var cn conn
			k := key{"t", 0}
			for _, s := range c.steps {
				cn.noteOutcome(k, header(s.seq), s.code, !s.refused)
			}
			parts := []filter.Part{{Topic: "t", Records: header(c.probe)}}
			cn.refuseAfterGaps(parts)
			if refused := parts[0].Answered && parts[0].Code == Retriable; refused != c.wantGap {
				t.Errorf("batch at %d after %+v: refused = %v, want %v", c.probe, c.steps, refused, c.wantGap)
			}
		})
	}
}
