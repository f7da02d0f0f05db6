package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/baton-kafka/baton/controlplane/store"
)

// event is the i-th event a subtest appends, every kind of field set.
func event(i int, topic string) store.Event {
	return store.Event{Time: at(i), Topic: topic, Kind: "added", From: "REJECT", To: "PROXY",
		Actor: "test", Reason: fmt.Sprint("event ", i), Attempt: i, Agent: "node", Version: uint64(i + 1), StartedAt: at(i + 1)}
}

// appendEvents appends an event of each topic in turn and returns them as
// AppendEvent did, checking that each is numbered above the last.
func appendEvents(t *testing.T, ctx context.Context, s store.Store, from int, topics ...string) []store.Event {
	t.Helper()
	var out []store.Event
	var last uint64
	for i, topic := range topics {
		e := event(from+i, topic)
		got, err := s.AppendEvent(ctx, e)
		if err != nil {
			t.Fatalf("AppendEvent: %v", err)
		}
		if got.Seq == 0 || got.Seq <= last {
			t.Fatalf("AppendEvent numbered an event %d after %d: want above 0 and above every earlier one", got.Seq, last)
		}
		last = got.Seq
		if e.Seq = got.Seq; !reflect.DeepEqual(got, e) {
			t.Errorf("AppendEvent returned %+v for %+v: want it as given, with its Seq", got, e)
		}
		out = append(out, got)
	}
	return out
}

// after returns the events of evs with Seq above seq, of topic ("" for
// all): what Events and Follow must give.
func after(evs []store.Event, topic string, seq uint64) []store.Event {
	var out []store.Event
	for _, e := range evs {
		if e.Seq > seq && (topic == "" || e.Topic == topic) {
			out = append(out, e)
		}
	}
	return out
}

func testAppendEvent(t *testing.T, impl Impl) {
	ctx := ctxOf(t)
	s := open(t, impl)
	first := appendEvents(t, ctx, s, 0, "a", "b", "a")
	second := appendEvents(t, ctx, s, 3, "b", "a")
	if second[0].Seq <= first[2].Seq {
		t.Errorf("AppendEvent numbered %d after %d", second[0].Seq, first[2].Seq)
	}
	all := append(first, second...)
	got, err := s.Events(ctx, "", 0)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if !reflect.DeepEqual(got, all) {
		t.Errorf("Events after AppendEvent: %+v, want %+v", got, all)
	}
}

// seqCase is a topic and the index of the event to start after (-1: 0).
type seqCase struct {
	name  string
	topic string
	after int
}

var seqCases = []seqCase{
	{"every topic from the start", "", -1},
	{"every topic after the second", "", 1},
	{"one topic from the start", "a", -1},
	{"one topic after the first", "b", 0},
	{"after the last", "a", 2},
}

func seqOf(evs []store.Event, i int) uint64 {
	if i < 0 {
		return 0
	}
	return evs[i].Seq
}

func testEvents(t *testing.T, impl Impl) {
	ctx := ctxOf(t)
	s := open(t, impl)
	if got, err := s.Events(ctx, "", 0); err != nil || len(got) != 0 {
		t.Fatalf("Events of an empty store: %+v, %v; want none", got, err)
	}
	all := appendEvents(t, ctx, s, 0, "a", "b", "a")
	for _, tc := range seqCases {
		seq := seqOf(all, tc.after)
		got, err := s.Events(ctx, tc.topic, seq)
		if err != nil {
			t.Fatalf("Events(%q, %d): %v", tc.topic, seq, err)
		}
		if want := after(all, tc.topic, seq); len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Errorf("%s: Events(%q, %d) = %+v, want %+v", tc.name, tc.topic, seq, got, want)
		}
	}
}

func testFollow(t *testing.T, impl Impl) {
	for _, tc := range seqCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			followCase(t, open(t, impl), tc)
		})
	}
}

// followCase follows s from three events in, then appends more one at a
// time, each received (if it is the topic's) before the next is appended;
// the last is the topic's, so an event of another topic sent before it
// is seen. Once ctx ends nothing more may come, and the channel closes.
func followCase(t *testing.T, s store.Store, tc seqCase) {
	ctx := ctxOf(t)
	past := appendEvents(t, ctx, s, 0, "a", "b", "a")
	seq := seqOf(past, tc.after)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := s.Follow(fctx, tc.topic, seq)
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	for _, want := range after(past, tc.topic, seq) {
		receive(t, ctx, ch, want)
	}
	last := tc.topic
	if last == "" {
		last = "b"
	}
	for i, topic := range []string{"b", "a", "b", "c", last} {
		e := appendEvents(t, ctx, s, 3+i, topic)[0]
		if tc.topic == "" || topic == tc.topic {
			receive(t, ctx, ch, e)
		}
	}
	cancel()
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return
			}
			t.Errorf("Follow sent %+v: every event of %q after %d was received before", e, tc.topic, seq)
		case <-ctx.Done():
			t.Fatal("Follow's channel still open after its context ended")
		}
	}
}

func receive(t *testing.T, ctx context.Context, ch <-chan store.Event, want store.Event) {
	t.Helper()
	select {
	case got, ok := <-ch:
		if !ok {
			t.Fatalf("Follow's channel closed before %+v, its context not ended", want)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Follow sent %+v, want %+v", got, want)
		}
	case <-ctx.Done():
		t.Fatalf("Follow did not send %+v", want)
	}
}
