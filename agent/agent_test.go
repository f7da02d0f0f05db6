package agent_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/migration"
)

type fixture struct {
	src, dst *embedded.Cluster
	agent    *agent.Agent
	addr     string
}

func startFixture(t *testing.T, routes []agent.Route, opts ...agent.Opt) *fixture {
	t.Helper()
	// Two cluster ids, as two real clusters have.
	src, err := embedded.Start(embedded.KfakeOpts(kfake.ClusterID("source")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start(embedded.KfakeOpts(kfake.ClusterID("destination")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(&testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	base := []agent.Opt{
		agent.Listen("127.0.0.1:0"),
		agent.Source(src.Addrs()...),
		agent.Destination(dst.Addrs()...),
		agent.Routes(agent.NewRouteTable(routes)),
		agent.Logger(log),
	}
	a, err := agent.New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, a)
	return &fixture{src: src, dst: dst, agent: a, addr: a.Addr()}
}

// serve runs a until t ends and returns once it serves (within a minute).
func serve(t *testing.T, a *agent.Agent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent.Run returned before serving: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the agent did not serve within a minute (the source never answered it)")
	}
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func newClient(t *testing.T, bootstrap string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	if bootstrap != "" { // else opts name the seeds
		opts = append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, opts...)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTopic(t *testing.T, bootstrap, topic string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, bootstrap))
	resp, err := adm.CreateTopic(context.Background(), partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating %s on %s: %v", topic, bootstrap, err)
	}
}

type acked struct {
	key       string
	partition int32
	offset    int64
}

// produceN produces n keyed records with headers and returns what was acked.
func produceN(t *testing.T, cl *kgo.Client, topic string, n int) []acked {
	t.Helper()
	return produceRange(t, cl, topic, 0, n)
}

// produceRange produces records from..from+n-1 (key-i, value-i, header seq).
func produceRange(t *testing.T, cl *kgo.Client, topic string, from, n int) []acked {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var (
		mu  sync.Mutex
		out []acked
		wg  sync.WaitGroup
	)
	errs := make(chan error, n)
	for i := from; i < from+n; i++ {
		wg.Add(1)
		r := &kgo.Record{
			Topic:   topic,
			Key:     []byte("key-" + strconv.Itoa(i)),
			Value:   []byte("value-" + strconv.Itoa(i)),
			Headers: []kgo.RecordHeader{{Key: "seq", Value: []byte(strconv.Itoa(i))}},
		}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			out = append(out, acked{string(r.Key), r.Partition, r.Offset})
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("produce: %v", err)
	}
	return out
}

// readAll consumes every record of topic from bootstrap, directly.
func readAll(t *testing.T, bootstrap, topic string, want int) map[string]acked {
	t.Helper()
	return readAllWith(t, topic, want, kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
}

// readAllWith is readAll with a client made of opts (its seed brokers and
// credentials).
func readAllWith(t *testing.T, topic string, want int, opts ...kgo.Opt) map[string]acked {
	t.Helper()
	cl := newClient(t, "", append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string]acked{}
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records of %s: %v", len(got), want, topic, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			k := string(r.Key)
			if _, dup := got[k]; dup {
				t.Errorf("duplicate record %s", k)
			}
			if want := "value-" + k[len("key-"):]; string(r.Value) != want {
				t.Errorf("record %s has value %q, want %q", k, r.Value, want)
			}
			got[k] = acked{k, r.Partition, r.Offset}
		})
	}
	return got
}

func checkAcked(t *testing.T, acks []acked, stored map[string]acked) {
	t.Helper()
	for _, a := range acks {
		s, ok := stored[a.key]
		if !ok {
			t.Errorf("acked record %s is not stored", a.key)
			continue
		}
		if s != a {
			t.Errorf("record %s acked at %d/%d but stored at %d/%d", a.key, a.partition, a.offset, s.partition, s.offset)
		}
	}
}

func TestProduceThroughAgentLandsWhereAcked(t *testing.T) {
	t.Parallel()
	codecs := map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	}
	for name, codec := range codecs {
		for _, idempotent := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/idempotent=%v", name, idempotent), func(t *testing.T) {
				t.Parallel()
				f := startFixture(t, nil)
				topic := "orders"
				createTopic(t, f.addr, topic, 6)
				opts := []kgo.Opt{kgo.ProducerBatchCompression(codec), kgo.RequiredAcks(kgo.AllISRAcks())}
				if !idempotent {
					opts = append(opts, kgo.DisableIdempotentWrite())
				}
				acks := produceN(t, newClient(t, f.addr, opts...), topic, 2000)
				// Read from the source directly: the agent forwarded there.
				checkAcked(t, acks, readAll(t, f.src.Bootstrap(), topic, len(acks)))
			})
		}
	}
}

func TestConsumerGroupAndAdminThroughAgent(t *testing.T) {
	t.Parallel()
	f := startFixture(t, nil)
	topic := "events"
	createTopic(t, f.addr, topic, 3)
	acks := produceN(t, newClient(t, f.src.Bootstrap()), topic, 300)

	cl := newClient(t, f.addr, kgo.ConsumeTopics(topic), kgo.ConsumerGroup("g1"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string]acked{}
	for len(got) < len(acks) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d through the agent", len(got), len(acks))
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = acked{string(r.Key), r.Partition, r.Offset} })
	}
	checkAcked(t, acks, got)
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit through the agent: %v", err)
	}

	// The commit is on the source, where the group lives.
	adm := kadm.NewClient(newClient(t, f.src.Bootstrap()))
	offs, err := adm.FetchOffsets(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	var committed int64
	offs.Each(func(o kadm.OffsetResponse) { committed += o.At })
	if committed != int64(len(acks)) {
		t.Errorf("group g1 committed %d records on the source, want %d", committed, len(acks))
	}

	// Admin through the agent.
	agentAdm := kadm.NewClient(newClient(t, f.addr))
	ends, err := agentAdm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	ends.Each(func(o kadm.ListedOffset) { end += o.Offset })
	if end != int64(len(acks)) {
		t.Errorf("end offsets through the agent sum to %d, want %d", end, len(acks))
	}
	cfgs, err := agentAdm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfgs.On(topic, nil); err != nil {
		t.Errorf("describe configs of %s through the agent: %v", topic, err)
	}
	meta, err := agentAdm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Brokers) != 1 || meta.Brokers[0].Port != int32(mustPort(t, f.addr)) {
		t.Errorf("agent metadata names brokers %v, want only the agent at %s", meta.Brokers, f.addr)
	}
}

func mustPort(t *testing.T, addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

func TestLeaderMovesWhileProducing(t *testing.T) {
	t.Parallel()
	f := startFixture(t, nil)
	topic := "moving"
	createTopic(t, f.addr, topic, 6)
	cl := newClient(t, f.addr, kgo.DefaultProduceTopic(topic), kgo.MetadataMinAge(100*time.Millisecond))

	stop := make(chan struct{})
	var moves atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		kc := f.src.Kfake()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			p := int32(n % 6)
			leader := kc.LeaderFor(topic, p)
			if err := kc.MoveTopicPartition(topic, p, (leader+1)%3); err != nil {
				t.Errorf("moving %s/%d: %v", topic, p, err)
				return
			}
			moves.Add(1)
		}
	}()
	// Produce in chunks until enough records went out and leaders moved
	// several times meanwhile: on a fast machine one bulk produce can end
	// before the first move.
	var acks []acked
	deadline := time.Now().Add(60 * time.Second)
	for len(acks) < 5000 || moves.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after 60s: %d records, %d leader moves", len(acks), moves.Load())
		}
		acks = append(acks, produceRange(t, cl, topic, len(acks), 500)...)
	}
	close(stop)
	<-done
	checkAcked(t, acks, readAll(t, f.src.Bootstrap(), topic, len(acks)))
}

func TestRoutesMigratingHoldsThenCompleteWritesDestination(t *testing.T) {
	t.Parallel()
	topic := "moving-house"
	f := startFixture(t, []agent.Route{{Topic: topic, State: migration.Migrating, HoldMax: 30 * time.Second}})
	createTopic(t, f.src.Bootstrap(), topic, 3)
	createTopic(t, f.dst.Bootstrap(), topic, 3)
	cl := newClient(t, f.addr, kgo.DefaultProduceTopic(topic), kgo.DisableIdempotentWrite())

	res := make(chan error, 1)
	cl.Produce(context.Background(), &kgo.Record{Key: []byte("k"), Value: []byte("held")}, func(_ *kgo.Record, err error) { res <- err })
	select {
	case err := <-res:
		t.Fatalf("produce to a MIGRATING topic in hold mode answered before the route changed: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	f.agent.Routes().Replace([]agent.Route{{Topic: topic, State: migration.Complete}})
	if err := <-res; err != nil {
		t.Fatalf("held produce after COMPLETE: %v", err)
	}
	if n := endSum(t, f.dst.Bootstrap(), topic); n != 1 {
		t.Errorf("destination holds %d records, want 1", n)
	}
	if n := endSum(t, f.src.Bootstrap(), topic); n != 0 {
		t.Errorf("source holds %d records, want 0", n)
	}
}

func TestRoutesMigratingRetriableAnswersNotLeader(t *testing.T) {
	t.Parallel()
	topic := "refused"
	f := startFixture(t, []agent.Route{{Topic: topic, State: migration.Migrating, Mode: migration.Retriable}})
	createTopic(t, f.src.Bootstrap(), topic, 1)
	cl := newClient(t, f.addr, kgo.DefaultProduceTopic(topic), kgo.RecordRetries(1), kgo.DisableIdempotentWrite())
	err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("x")}).FirstErr()
	if err == nil || !errors.Is(err, kerrNotLeader) {
		t.Fatalf("produce to a MIGRATING topic in retriable mode: got %v, want NOT_LEADER_OR_FOLLOWER", err)
	}
	if n := endSum(t, f.src.Bootstrap(), topic); n != 0 {
		t.Errorf("source holds %d records, want 0", n)
	}
}

func endSum(t *testing.T, bootstrap, topic string) int64 {
	t.Helper()
	ends, err := kadm.NewClient(newClient(t, bootstrap)).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

func TestBadFramesCloseOnlyTheirConnection(t *testing.T) {
	t.Parallel()
	f := startFixture(t, nil, agent.MaxFrameBytes(1<<20))
	topic := "sturdy"
	createTopic(t, f.addr, topic, 1)
	good := newClient(t, f.addr, kgo.DefaultProduceTopic(topic))

	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	cases := map[string][]byte{
		"oversized":        binary.BigEndian.AppendUint32(nil, 2<<20),
		"negative size":    binary.BigEndian.AppendUint32(nil, 0xffffffff),
		"tiny":             frame([]byte{0, 0, 0}),
		"bad client id":    frame([]byte{0, 18, 0, 0, 0, 0, 0, 1, 0x7f, 0x00}),
		"unknown api key":  frame([]byte{0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff}),
		"garbage produce":  frame([]byte{0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0xde, 0xad}),
		"truncated header": frame([]byte{0, 3, 0, 1, 0, 0, 0, 1}),
	}
	for name, payload := range cases {
		nc, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(payload)
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(nc); err != nil {
			t.Errorf("%s: connection not closed by the agent: %v", name, err)
		}
		nc.Close()
		// Everyone else still works.
		if err := good.ProduceSync(context.Background(), &kgo.Record{Value: []byte(name)}).FirstErr(); err != nil {
			t.Fatalf("after %s: a healthy client failed: %v", name, err)
		}
	}
}
