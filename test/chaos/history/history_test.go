package history

import (
	"strings"
	"testing"
	"time"
)

// TestCheckFindsEveryViolation feeds the checker histories with one planted
// violation each and requires it to report exactly that one: a checker that
// cannot fail proves nothing.
func TestCheckFindsEveryViolation(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	idem := Producer{ID: "p0", Client: "franz", Idempotent: true, Topic: "t", Start: t0}
	plain := Producer{ID: "p1", Client: "kcat", Topic: "t", Start: t0}
	ack := func(p string, seq int, part int32, off int64, s float64) Ack {
		return Ack{Producer: p, Seq: seq, Partition: part, Offset: off, At: at(s)}
	}
	rec := func(p string, seq int, part int32, off int64) Record {
		return Record{Partition: part, Offset: off, Key: Key(p, seq)}
	}
	// A clean history: p0 acked 0..2 on partition 0 at offsets 0..2.
	cleanAcks := []Ack{ack("p0", 0, 0, 0, 1), ack("p0", 1, 0, 1, 2), ack("p0", 2, 0, 2, 3)}
	cleanLog := []Record{rec("p0", 0, 0, 0), rec("p0", 1, 0, 1), rec("p0", 2, 0, 2)}

	tests := []struct {
		name      string
		producers []Producer
		acks      []Ack
		completed bool
		src, dst  []Record
		want      func(Report) int // the count that must be 1 ...
		field     string           // ... and its name in the report
	}{
		{name: "clean in S", acks: cleanAcks, src: cleanLog},
		{name: "clean in D after COMPLETE", acks: cleanAcks, completed: true, src: cleanLog[:2], dst: cleanLog},
		{name: "lost from S", acks: cleanAcks, src: cleanLog[:2],
			want: func(r Report) int { return r.Lost }, field: "acked-missing"},
		{name: "in S but not D after COMPLETE", acks: cleanAcks, completed: true, src: cleanLog, dst: cleanLog[:2],
			want: func(r Report) int { return r.Lost }, field: "acked-missing"},
		{name: "wrong partition", acks: cleanAcks,
			src:  []Record{rec("p0", 0, 0, 0), rec("p0", 1, 0, 1), rec("p0", 2, 1, 0)},
			want: func(r Report) int { return r.Lost }, field: "acked-missing"},
		{name: "reordered", acks: cleanAcks,
			src:  []Record{rec("p0", 0, 0, 0), rec("p0", 2, 0, 1), rec("p0", 1, 0, 2)},
			want: func(r Report) int { return r.Reordered }, field: "reordered"},
		{name: "misplaced", acks: cleanAcks,
			src:  []Record{rec("p0", 0, 0, 0), rec("p0", 1, 0, 1), rec("p0", 9, 0, 2), rec("p0", 2, 0, 3)},
			want: func(r Report) int { return r.Misplaced }, field: "misplaced"},
		{name: "acked without an offset", acks: []Ack{ack("p0", 0, 0, 0, 1), ack("p0", 1, 0, -1001, 2), ack("p0", 2, 0, 2, 3)}, src: cleanLog},
		{name: "acked without an offset, missing", acks: []Ack{ack("p0", 0, 0, 0, 1), ack("p0", 1, 0, -1001, 2), ack("p0", 2, 0, 2, 3)},
			src:  []Record{rec("p0", 0, 0, 0), rec("p0", 2, 0, 2)},
			want: func(r Report) int { return r.Lost }, field: "acked-missing"},
		{name: "idempotent duplicate", acks: cleanAcks, src: append(append([]Record(nil), cleanLog...), rec("p0", 2, 0, 3)),
			want: func(r Report) int { return r.Duplicates }, field: "duplicates"},
		{name: "plain duplicate is allowed", producers: []Producer{plain},
			acks: []Ack{ack("p1", 0, 0, 0, 1), ack("p1", 1, 0, 2, 2)},
			src:  []Record{rec("p1", 0, 0, 0), rec("p1", 1, 0, 1), rec("p1", 1, 0, 2)}},
		{name: "write to S after replication stopped", acks: cleanAcks, completed: true,
			src: append(append([]Record(nil), cleanLog...), rec("p0", 7, 0, 3)), dst: cleanLog,
			want: func(r Report) int { return r.LateSourceWrites }, field: "late-source-writes"},
		{name: "failed record is fatal", acks: append(append([]Ack(nil), cleanAcks...), Ack{Producer: "p0", Seq: 3, Err: "OUT_OF_ORDER_SEQUENCE_NUMBER", At: at(4)}),
			src:  cleanLog,
			want: func(r Report) int { return r.Fatal }, field: "fatal"},
		{name: "hung producer", acks: append(append([]Ack(nil), cleanAcks...), Ack{Producer: "p0", Seq: 3, Err: "driver stopped", Unanswered: true, At: at(90)}),
			src:  cleanLog,
			want: func(r Report) int { return r.Unanswered }, field: "unanswered"},
		{name: "client crash is fatal", producers: []Producer{{ID: "p0", Client: "franz", Idempotent: true, Topic: "t", Start: t0, Err: "exit 1"}},
			acks: cleanAcks, src: cleanLog,
			want: func(r Report) int { return r.Fatal }, field: "fatal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			producers := tt.producers
			if producers == nil {
				producers = []Producer{idem}
			}
			in := Input{Producers: producers, Acks: tt.acks,
				Source:      map[string][]Record{"t": tt.src},
				Destination: map[string][]Record{"t": tt.dst},
				Completed:   map[string]bool{"t": tt.completed}}
			rep := Check(in)
			if tt.want == nil {
				if !rep.OK() {
					t.Fatalf("clean history reported broken:\n%s", rep)
				}
				return
			}
			if got := tt.want(rep); got != 1 || rep.OK() {
				t.Fatalf("%s = %d, OK() = %v; want 1 and false:\n%s", tt.field, got, rep.OK(), rep)
			}
			if len(rep.Examples[tt.field]) == 0 || !strings.Contains(rep.String(), tt.field) {
				t.Fatalf("report gives no example of %s:\n%s", tt.field, rep)
			}
		})
	}
}

// TestCheckLongestStall measures the longest gap between acks, counting from
// the producer's start.
func TestCheckLongestStall(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000, 0)
	p := Producer{ID: "p0", Client: "franz", Idempotent: true, Topic: "t", Start: t0}
	acks := []Ack{
		{Producer: "p0", Seq: 0, Offset: 0, At: t0.Add(2 * time.Second)},
		{Producer: "p0", Seq: 1, Offset: 1, At: t0.Add(9 * time.Second)},
		{Producer: "p0", Seq: 2, Offset: 2, At: t0.Add(10 * time.Second)},
	}
	log := []Record{{0, 0, "p0-0"}, {0, 1, "p0-1"}, {0, 2, "p0-2"}}
	rep := Check(Input{Producers: []Producer{p}, Acks: acks, Source: map[string][]Record{"t": log}})
	if rep.MaxStall != 7*time.Second || rep.StallProducer != "p0" || rep.Acked != 3 {
		t.Fatalf("longest stall %v by %q over %d acks; want 7s by p0 over 3:\n%s", rep.MaxStall, rep.StallProducer, rep.Acked, rep)
	}
	// A producer stopped 60 s after its last ack stalled 60 s.
	p.End = t0.Add(70 * time.Second)
	rep = Check(Input{Producers: []Producer{p}, Acks: acks, Source: map[string][]Record{"t": log}})
	if rep.MaxStall != 60*time.Second {
		t.Fatalf("longest stall %v; want 60s, to the producer's end", rep.MaxStall)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		key  string
		id   string
		seq  int
		fail bool
	}{
		{key: "r1-franz-idem-12", id: "r1-franz-idem", seq: 12},
		{key: "p-0", id: "p", seq: 0},
		{key: "nodash", fail: true},
		{key: "-3", fail: true},
		{key: "p-x", fail: true},
	} {
		id, seq, err := ParseKey(tt.key)
		if (err != nil) != tt.fail || (!tt.fail && (id != tt.id || seq != tt.seq)) {
			t.Errorf("ParseKey(%q) = %q, %d, %v", tt.key, id, seq, err)
		}
	}
}
