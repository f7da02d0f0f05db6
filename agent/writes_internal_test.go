package agent

import (
	"testing"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
)

// TestSourceWritesReportAndResend: a report carries the merged ranges; one
// not answered is carried again; an answered one is forgotten; the per
// report and held bounds hold, an overflow marking the partition unknown.
func TestSourceWritesReportAndResend(t *testing.T) {
	t.Parallel()
	routes := NewRouteTable([]Route{{Topic: "t", State: migration.Proxy}, {Topic: "r", State: migration.Reject}})
	w := newSourceWrites(true, routes)
	w.acked("t", 0, 0, 5)
	w.acked("t", 0, 5, 9)
	w.acked("t", 0, 20, 21)
	w.acked("r", 0, 0, 1) // REJECT: not watched
	first, truncated := w.report()
	if truncated {
		t.Errorf("a report within the bound says it is truncated")
	}
	if len(first) != 1 || len(first["t"]) != 1 || len(first["t"][0].GetAcked()) != 2 {
		t.Fatalf("report %v: want t/0 with [0,9) and [20,21)", first)
	}
	if again, _ := w.report(); len(again["t"][0].GetAcked()) != 2 {
		t.Fatalf("an unanswered report is not carried again: %v", again)
	}
	w.acked("t", 0, 9, 10) // after the report was taken
	w.delivered([]*batonv1.TopicDrain{{Topic: "t", Writes: first["t"]}})
	all, _ := w.report()
	left := all["t"]
	if len(left) != 1 || len(left[0].GetAcked()) != 1 || left[0].GetAcked()[0].GetStart() != 9 || left[0].GetAcked()[0].GetEnd() != 10 {
		t.Fatalf("after delivery: %v, want only [9,10)", left)
	}

	w.unknown("t", 1, time.Now())
	if u, _ := w.report(); len(u["t"]) != 2 {
		t.Fatalf("acks=0 write not reported as unknown: %v", u)
	}

	b := newSourceWrites(true, routes)
	b.perReport, b.held = 3, 4
	for i := range int64(10) {
		b.acked("t", 0, 2*i, 2*i+1) // never adjacent: ten ranges
	}
	bounded, truncated := b.report()
	r := bounded["t"][0]
	if len(r.GetAcked()) != 3 {
		t.Errorf("report carries %d ranges, want the per-report bound 3", len(r.GetAcked()))
	}
	if !truncated {
		t.Errorf("a report the bound cut short does not say it is truncated")
	}
	if b.n > 4 {
		t.Errorf("%d ranges held, want at most 4", b.n)
	}
	if r.GetUnknownFrom() == nil {
		t.Errorf("ranges dropped at the bound, but the partition is not marked unknown")
	}
}
