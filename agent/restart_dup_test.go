package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter/pidmap"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/journal"
	"github.com/baton-kafka/baton/migration"
)

// Issue 23's duplicate (make chaos SEED=7): an agent killed after COMPLETE
// while a client's batch to the destination was outstanding. The batch was
// written there under the destination producer id the agent had mapped
// the client's session to; the client retried it through the agent started
// in its place, which mapped the session to a fresh destination producer
// id, and the destination wrote it a second time. With a state directory
// the new agent takes the mapping back and sends the retry under the same
// producer id and sequence: the destination answers it as the duplicate it
// is, at the first copy's offset.
func TestRetryToTheDestinationAfterAnAgentRestartIsNotDuplicated(t *testing.T) {
	t.Parallel()
	const topic = "restarted"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := startClusters(t)
	clients := map[string]*kgo.Client{}
	for name, c := range map[string]*embedded.Cluster{"source": src, "destination": dst} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		clients[name] = cl
		if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil || resp.Err != nil {
			t.Fatalf("creating %s on the %s: %v %v", topic, name, err, resp.Err)
		}
	}
	ipid, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, clients["source"])
	if err == nil {
		err = kerr.ErrorForCode(ipid.ErrorCode)
	}
	if err != nil {
		t.Fatalf("InitProducerID: %v", err)
	}
	pid, epoch := ipid.ProducerID, ipid.ProducerEpoch
	dstEnd := func() int64 {
		t.Helper()
		ends, err := kadm.NewClient(clients["destination"]).ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup(topic, 0)
		return o.Offset
	}
	batches := make([][]byte, 3)
	for seq := range batches {
		batches[seq] = pinTestSeqBatch(fmt.Sprint("seq ", seq), pid, epoch, int32(seq))
	}
	complete := func() Opt {
		return Routes(NewRouteTable([]Route{{Topic: topic, State: migration.Complete}}))
	}
	state := t.TempDir()

	first, stopFirst := startAgentOn(t, src, dst, complete(), StateDir(state))
	conn := DialRaw(t, first.Addr())
	for seq := range 2 {
		if code, off := conn.Produce(topic, batches[seq]); code != 0 || off != int64(seq) {
			t.Fatalf("seq %d through the first agent: %v at %d, want success at %d", seq, kerr.ErrorForCode(code), off, seq)
		}
	}
	// The first agent dies; the client never saw seq 1's answer (as if
	// the agent had been killed before writing it) and retries it through
	// the agent that replaces it, on the same state directory.
	stopFirst()
	second, _ := startAgentOn(t, src, dst, complete(), StateDir(state))
	conn = DialRaw(t, second.Addr())
	if code, off := conn.Produce(topic, batches[1]); code != 0 || off != 1 {
		t.Fatalf("retry of seq 1 through the restarted agent: %v at %d, want success at the first copy's offset 1", kerr.ErrorForCode(code), off)
	}
	if e := dstEnd(); e != 2 {
		t.Fatalf("after the retry of seq 1 the destination ends at %d, want 2: the retry was written a second time", e)
	}
	if code, off := conn.Produce(topic, batches[2]); code != 0 || off != 2 {
		t.Fatalf("seq 2 through the restarted agent: %v at %d, want success at 2", kerr.ErrorForCode(code), off)
	}
	if e := dstEnd(); e != 3 {
		t.Fatalf("destination end offset %d after seq 2, want 3", e)
	}
}

// A state directory is one agent's: a second agent on it is refused at
// New, naming the directory.
func TestStateDirIsOneAgents(t *testing.T) {
	t.Parallel()
	src, dst := startClusters(t)
	dir := t.TempDir()
	startAgentOn(t, src, dst, StateDir(dir))
	_, err := New(Listen("127.0.0.1:0"), Source(src.Addrs()...), Destination(dst.Addrs()...), StateDir(dir),
		Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a second agent on %s: %v, want ErrBadConfig naming it", dir, err)
	}
}

// A state file that does not hold mappings fails the start, naming it.
func TestStateDirRefusesAnUnreadableJournal(t *testing.T) {
	t.Parallel()
	src, dst := startClusters(t)
	dir := t.TempDir()
	// One whole record that is not a mapping (a format to come).
	j, _, err := journal.Open(filepath.Join(dir, producerIDsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte{9}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	_, err = New(Listen("127.0.0.1:0"), Source(src.Addrs()...), Destination(dst.Addrs()...), StateDir(dir),
		Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err == nil || !strings.Contains(err.Error(), producerIDsFile) {
		t.Fatalf("an unreadable journal: %v, want an error naming %s", err, producerIDsFile)
	}
}

// The journal is rewritten from the live mappings once it holds twice as
// many records as they are, and what it holds afterwards is what a
// restarted agent needs.
func TestPIDJournalCompacts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	live := map[int64]pidmap.Mapping{}
	st.pids.live = func() []pidmap.Mapping {
		var out []pidmap.Mapping
		for _, m := range live {
			out = append(out, m)
		}
		return out
	}
	// 1,200 sessions come and go; only the last ten stay live.
	for i := range int64(1200) {
		m := pidmap.Mapping{Source: pidmap.Session{ID: i}, Destination: pidmap.Session{ID: 1000 + i}, Topic: "t", Base: int32(i)}
		live[i] = m
		delete(live, i-10)
		if err := st.pids.Record(m); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.pids.compacted.Load(); n == 0 {
		t.Fatalf("1,200 records of which 10 live: never compacted")
	}
	st.close()
	again, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer again.close()
	got := map[int64]pidmap.Mapping{}
	for _, m := range again.restored {
		got[m.Source.ID] = m
	}
	for id, m := range live {
		if got[id] != m {
			t.Errorf("session %d: restored %+v, want %+v", id, got[id], m)
		}
	}
	if len(again.restored) > 1024+2*len(live) {
		t.Errorf("after compaction the journal holds %d records for %d live mappings", len(again.restored), len(live))
	}
}

// Uncertain batches are journaled beside the mappings and come back, both
// kinds, after a restart and after a rewrite from what is live.
func TestPIDJournalKeepsUncertainBatches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1764979200, 123456789)
	toSrc := pidmap.Uncertain{Batch: pidmap.Batch{Topic: "orders", Partition: 2, ProducerID: 7, Epoch: 3, Seq: 40, Records: 5},
		At: at, Print: 0xfeedface}
	toDst := pidmap.Uncertain{Batch: pidmap.Batch{Topic: "payments", Partition: 1, ProducerID: 8, Epoch: 0, Seq: 9, Records: 1},
		At: at.Add(time.Second), Print: 42, ToDestination: true,
		Sent: pidmap.Batch{Topic: "payments", Partition: 1, ProducerID: 5001, Epoch: 2, Seq: 0, Records: 1}}
	m := pidmap.Mapping{Source: pidmap.Session{ID: 8}, Destination: pidmap.Session{ID: 5001, Epoch: 2}, Topic: "payments", Partition: 1, Base: 9}
	for _, err := range []error{st.pids.Record(m), st.pids.RecordUncertain(toSrc), st.pids.RecordUncertain(toDst)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	check := func(st *agentState, when string) {
		t.Helper()
		if len(st.restored) != 1 || st.restored[0] != m {
			t.Errorf("%s: mappings %+v, want %+v", when, st.restored, m)
		}
		got := map[pidmap.Batch]pidmap.Uncertain{}
		for _, u := range st.restoredUncertain {
			got[u.Batch] = u
		}
		for _, want := range []pidmap.Uncertain{toSrc, toDst} {
			u := got[want.Batch]
			if !u.At.Equal(want.At) || u.Print != want.Print || u.ToDestination != want.ToDestination || u.Sent != want.Sent {
				t.Errorf("%s: uncertain batch %+v restored as %+v", when, want, u)
			}
		}
		if len(st.restoredUncertain) != 2 {
			t.Errorf("%s: %d uncertain batches restored, want 2", when, len(st.restoredUncertain))
		}
	}
	st.close()
	again, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	check(again, "after a restart")
	// A rewrite keeps what the filter still holds.
	again.pids.live = func() []pidmap.Mapping { return []pidmap.Mapping{m} }
	again.pids.liveUncertain = func() []pidmap.Uncertain { return []pidmap.Uncertain{toSrc, toDst} }
	for range 1100 {
		if err := again.pids.Record(m); err != nil {
			t.Fatal(err)
		}
	}
	if again.pids.compacted.Load() == 0 {
		t.Fatal("never compacted")
	}
	again.close()
	third, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer third.close()
	third.restored = third.restored[len(third.restored)-1:] // the records after the rewrite repeat m
	check(third, "after a rewrite")
}

// startClusters starts a one-node kfake source and destination.
func startClusters(t *testing.T) (src, dst *embedded.Cluster) {
	t.Helper()
	var err error
	if src, err = embedded.Start(embedded.Brokers(1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	if dst, err = embedded.Start(embedded.Brokers(1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	return src, dst
}

// startAgentOn runs an agent in front of src and dst; stop ends it (and
// waits for Run to return), as does the test's end.
func startAgentOn(t *testing.T, src, dst *embedded.Cluster, opts ...Opt) (*Agent, func()) {
	t.Helper()
	base := []Opt{Listen("127.0.0.1:0"), Source(src.Addrs()...), Destination(dst.Addrs()...),
		Logger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	a, err := New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	var stopped bool
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	select {
	case <-a.Ready():
	case err := <-ran:
		stopped = true
		t.Fatalf("agent.Run returned before serving: %v", err)
	}
	return a, stop
}
