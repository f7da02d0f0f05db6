package clients

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// Lines as kcat (librdkafka 2.0.2, -vv -d msg,protocol) prints them, on
// broker 1 unless said otherwise.

func kcatDebugLine(broker, fac, msg string) string {
	return fmt.Sprintf("%%7|1796150511.701|%s|rdkafka#producer-1| [thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/%s: %s", fac, broker, msg)
}

func built(p int32, n int) string {
	return kcatDebugLine("1", "PRODUCE", fmt.Sprintf("tp [%d]: Produce MessageSet with %d message(s) (1201 bytes, ApiVersion 7, MsgVersion 2, MsgId 0, BaseSeq -1, PID{Invalid}, uncompressed)", p, n))
}

func sent() string {
	return kcatDebugLine("1", "SEND", "Sent ProduceRequest (v7, 1265 bytes @ 0, CorrId 2)")
}

func deliveredBatch(p int32, n int, msgid int64) string {
	return kcatDebugLine("1", "MSGSET", fmt.Sprintf("tp [%d]: MessageSet with %d message(s) (MsgId %d, BaseSeq -1) delivered", p, n, msgid))
}

func failedBatch(p int32, n int, err, actions string) string {
	return kcatDebugLine("1", "MSGSET", fmt.Sprintf("tp [%d]: MessageSet with %d message(s) (MsgId 0, BaseSeq -1) encountered error: %s (actions %s)", p, n, err, actions))
}

// reports are kcat's reports of n messages of p from offset base.
func reports(p int32, base int64, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("%% Message delivered to partition %d (offset %d) on broker 1", p, base+int64(i)))
	}
	return out
}

func lines(parts ...any) []string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			out = append(out, v)
		case []string:
			out = append(out, v...)
		}
	}
	return out
}

type kcatMapped struct {
	Seq       int
	Partition int32
	Offset    int64
}

// TestKcatReportsMap covers the driver's mapping of kcat's reports to
// records. "overtaken" is the shape of the chaos suite's seed 302 (and of
// TestKcatAcksWhenARetryIsOvertaken, without an agent): the request with
// partition 2's messages 28..36 was built, sent and written at offsets
// 27..35, but answered retriable; the next request, built meanwhile with
// messages 37..68, went first and was acked at 36..67; the retry of 28..36
// was acked at 68..76. Mapped by position, as the driver once did, the
// 28th report of the partition (offset 36) went to the 28th record: 41
// records acked 9 offsets from where they are.
func TestKcatReportsMap(t *testing.T) {
	// Partition 2 gets every other record, partition 0 the rest.
	queues := map[int32][]int{}
	for seq := 0; seq < 200; seq++ {
		p := int32(0)
		if seq%2 == 1 {
			p = 2
		}
		queues[p] = append(queues[p], seq)
	}
	p2 := func(k int) int { return queues[2][k-1] } // the record of librdkafka's k-th message
	p2s := func(from, to int, off0 int64) []kcatMapped {
		var w []kcatMapped
		for k := from; k <= to; k++ {
			w = append(w, kcatMapped{p2(k), 2, off0 + int64(k-from)})
		}
		return w
	}
	tests := []struct {
		name       string
		idempotent bool
		lines      []string
		want       []kcatMapped
		wantErr    string
	}{
		{
			name: "in order",
			lines: lines(
				built(2, 2), sent(), deliveredBatch(2, 2, 0), reports(2, 0, 2),
				built(0, 1), sent(), deliveredBatch(0, 1, 0), reports(0, 0, 1),
				built(2, 1), sent(), deliveredBatch(2, 1, 0), reports(2, 2, 1)),
			want: []kcatMapped{{p2(1), 2, 0}, {p2(2), 2, 1}, {0, 0, 0}, {p2(3), 2, 2}},
		},
		{
			name: "overtaken",
			lines: lines(
				built(2, 27), sent(), deliveredBatch(2, 27, 0), reports(2, 0, 27),
				built(2, 9), sent(), // messages 28..36, in flight
				built(2, 32), // 37..68, built meanwhile
				failedBatch(2, 9, "Broker: Not leader for partition", "Refresh,MsgNotPersisted"),
				sent(), // 37..68 goes first
				built(2, 10),
				deliveredBatch(2, 32, 0), reports(2, 36, 32),
				sent(), deliveredBatch(2, 10, 0), reports(2, 68, 10)), // 28..36, 69
			want: append(append(append(p2s(1, 27, 0), p2s(37, 68, 36)...), p2s(28, 36, 68)...), kcatMapped{p2(69), 2, 77}),
		},
		{
			// The driver passes offsets on as kcat printed them: one
			// relayed wrong is the history checker's to catch.
			name:  "an offset as kcat printed it",
			lines: lines(built(2, 2), sent(), deliveredBatch(2, 2, 0), reports(2, 40, 2)),
			want:  []kcatMapped{{p2(1), 2, 40}, {p2(2), 2, 41}},
		},
		{
			name: "a built request purged unsent, the one in flight answered later",
			lines: lines(
				built(2, 3), sent(), built(2, 2),
				failedBatch(2, 2, kcatRetryPurged, "Retry"), // 4..5 back
				deliveredBatch(2, 3, 0), reports(2, 0, 3),
				built(2, 3), sent(), deliveredBatch(2, 3, 0), reports(2, 3, 3)),
			want: p2s(1, 6, 0),
		},
		{
			name: "failed for good",
			lines: lines(
				built(2, 2), sent(), failedBatch(2, 2, "Broker: Message size too large", "Permanent,MsgNotPersisted"),
				built(2, 1), sent(), deliveredBatch(2, 1, 0), reports(2, 0, 1)),
			want: []kcatMapped{{p2(3), 2, 0}},
		},
		{
			name: "reports interleaved with other output",
			lines: lines(
				built(2, 2), sent(), deliveredBatch(2, 2, 0),
				reports(2, 10, 1),
				kcatDebugLine("1", "SEND", "Sent MetadataRequest (v4, 37 bytes @ 0, CorrId 9)"),
				kcatDebugLine("1", "MSGSET", "other [2]: MessageSet with 5 message(s) (MsgId 0, BaseSeq -1) delivered"),
				reports(2, 11, 1)),
			want: []kcatMapped{{p2(1), 2, 10}, {p2(2), 2, 11}},
		},
		{
			name:       "idempotent: by msgid",
			idempotent: true,
			lines: lines(
				deliveredBatch(2, 2, 3), reports(2, 7, 2),
				deliveredBatch(2, 2, 1), reports(2, 9, 2)),
			want: []kcatMapped{{p2(3), 2, 7}, {p2(4), 2, 8}, {p2(1), 2, 9}, {p2(2), 2, 10}},
		},
		{
			name:       "idempotent: implicitly acked",
			idempotent: true,
			lines: lines(
				deliveredBatch(2, 1, 3),
				kcatDebugLine("1", "IMPLICITACK", "tp [2] 2 message(s) implicitly acked by subsequent batch success (msgids 1..2, last acked 0)"),
				"% Message delivered to partition 2 (offset -1001) on broker -1",
				"% Message delivered to partition 2 (offset -1001) on broker -1",
				reports(2, 2, 1)),
			want: []kcatMapped{{p2(1), 2, -1001}, {p2(2), 2, -1001}, {p2(3), 2, 2}},
		},
		{
			name:    "a report no delivered batch accounts for",
			lines:   lines(built(2, 1), sent(), deliveredBatch(2, 1, 0), reports(2, 0, 2)),
			want:    []kcatMapped{{p2(1), 2, 0}},
			wantErr: "no delivered batch accounts for",
		},
		{
			name:    "a batch's offsets not consecutive",
			lines:   lines(built(2, 2), sent(), deliveredBatch(2, 2, 0), reports(2, 0, 1), reports(2, 5, 1)),
			want:    []kcatMapped{{p2(1), 2, 0}},
			wantErr: "starts at offset 0",
		},
		{
			name:    "an outcome of another size than its request",
			lines:   lines(built(2, 2), sent(), deliveredBatch(2, 3, 0)),
			wantErr: "where its request held 2",
		},
		{
			name:    "an outcome without a request",
			lines:   lines(deliveredBatch(2, 1, 0)),
			wantErr: "no such request outstanding",
		},
		{
			name:    "a request sent that was never built",
			lines:   lines(sent()),
			wantErr: "never built",
		},
		{
			name:    "beyond the records sent",
			lines:   lines(built(2, 101), sent(), deliveredBatch(2, 101, 0), reports(2, 0, 101)),
			want:    p2s(1, 100, 0),
			wantErr: "beyond the 100 records",
		},
		{
			name:       "reported twice",
			idempotent: true,
			lines:      lines(deliveredBatch(2, 1, 1), reports(2, 0, 1), deliveredBatch(2, 1, 1), reports(2, 9, 1)),
			want:       []kcatMapped{{p2(1), 2, 0}},
			wantErr:    "twice",
		},
		{
			name:    "a batch left short of its reports",
			lines:   lines(built(2, 3), sent(), deliveredBatch(2, 3, 0), reports(2, 0, 2)),
			want:    []kcatMapped{{p2(1), 2, 0}, {p2(2), 2, 1}},
			wantErr: "reported only 2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newKcatReports("tp", tc.idempotent, queues)
			var got []kcatMapped
			for _, l := range tc.lines {
				if !r.line(l, func(seq int, p int32, off int64) { got = append(got, kcatMapped{seq, p, off}) },
					func(msg string) { t.Errorf("failure report %q", msg) }) {
					t.Errorf("line not taken: %q", l)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("mapped\n%v\nwant\n%v", got, tc.want)
			}
			err := r.err
			if err == nil {
				err = r.unreported()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestKcatReportsFailures: failure reports reach the driver as they are,
// and lines that are neither kcat's reports nor librdkafka's debug output
// are left for error messages.
func TestKcatReportsFailures(t *testing.T) {
	r := newKcatReports("tp", false, map[int32][]int{0: {0}})
	var failed []string
	fail := func(msg string) { failed = append(failed, msg) }
	if !r.line("% Delivery failed for message: Local: Message timed out", nil, fail) {
		t.Error("failure report not taken")
	}
	if r.line("%3|1796150511.701|FAIL|rdkafka#producer-1| [thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed", nil, fail) {
		t.Error("an error log line was taken, not left for the error message")
	}
	if want := []string{"Local: Message timed out"}; !reflect.DeepEqual(failed, want) {
		t.Errorf("failures %q, want %q", failed, want)
	}
}
