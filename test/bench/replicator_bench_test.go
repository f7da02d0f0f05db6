package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/test/kafka"
)

const (
	replTopic        = "repl-bench"
	replDefaultBytes = 1 << 30
)

// BenchmarkReplicatorVsMirrorMaker2: one topic (6 partitions, 1 KiB records,
// lz4 batches written once with franz-go) on a 1-broker Apache Kafka source
// is copied to a 1-broker Apache Kafka destination by a `baton replicator`
// process (to D.repl-bench, offsets kept) and by MirrorMaker 2
// (org.apache.kafka.connect.mirror.MirrorMaker, dedicated mode, to
// D.A.repl-bench), one after the other. Each is timed from its process
// start until the destination's end offsets hold every source record; its
// CPU time is read from /proc at that moment. BATON_BENCH_REPL_BYTES sets
// the data size (default 1 GiB).
func BenchmarkReplicatorVsMirrorMaker2(b *testing.B) {
	if b.N > 1 {
		b.Skip("runs a fixed workload once; use -benchtime 1x")
	}
	size := int64(replDefaultBytes)
	if s := os.Getenv("BATON_BENCH_REPL_BYTES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < recordBytes {
			b.Fatalf("BATON_BENCH_REPL_BYTES=%q: want a byte count of at least %d", s, recordBytes)
		}
		size = n
	}
	ctx := context.Background()
	mirrorCP, err := kafka.MirrorClasspath(ctx)
	if err != nil {
		b.Fatal(err)
	}
	java, err := kafka.Java()
	if err != nil {
		b.Fatal(err)
	}
	src, err := kafka.Start(ctx, kafka.Brokers(1), kafka.Dir(filepath.Join(b.TempDir(), "source")))
	if err != nil {
		b.Fatal(err)
	}
	defer src.Stop()
	dst, err := kafka.Start(ctx, kafka.Brokers(1), kafka.Dir(filepath.Join(b.TempDir(), "destination")))
	if err != nil {
		b.Fatal(err)
	}
	defer dst.Stop()

	createTopic(b, src.Bootstrap(), replTopic, 1)
	records := fillSource(b, src.Bootstrap(), size)
	bytes := records * recordBytes
	fmt.Fprintf(os.Stderr, "source: %d records (%.1f MiB of values), lz4\n", records, float64(bytes)/(1<<20))

	bin := buildBaton(b)
	baton := timeCopy(b, dst.Bootstrap(), replTopic, records, func() *exec.Cmd {
		return exec.Command(bin, "replicator", "--source", src.Bootstrap(), "--destination", dst.Bootstrap(),
			"--topics", replTopic, "--workers", strconv.Itoa(partitions), "--admin", "", "--log-level", "warn",
			"--group-sync-interval", "0")
	})
	mm2 := timeCopy(b, dst.Bootstrap(), "A."+replTopic, records, func() *exec.Cmd {
		dir := b.TempDir()
		props := filepath.Join(dir, "mm2.properties")
		if err := os.WriteFile(props, []byte(mm2Properties(src.Bootstrap(), dst.Bootstrap())), 0o644); err != nil {
			b.Fatal(err)
		}
		logCfg := filepath.Join(dir, "log4j2.properties")
		if err := os.WriteFile(logCfg, []byte(mm2Log4j), 0o644); err != nil {
			b.Fatal(err)
		}
		return exec.Command(java, "-Xms1g", "-Xmx1g", "-Dlog4j2.configurationFile="+logCfg,
			"-cp", mirrorCP, "org.apache.kafka.connect.mirror.MirrorMaker", props)
	})

	gib := float64(bytes) / (1 << 30)
	batonCPU, mm2CPU := baton.cpu.Seconds()/gib, mm2.cpu.Seconds()/gib
	batonMBps, mm2MBps := float64(bytes)/baton.wall.Seconds()/1e6, float64(bytes)/mm2.wall.Seconds()/1e6
	// Throughput per CPU second is bytes per CPU second.
	ratio := mm2CPU / batonCPU
	b.ReportMetric(batonMBps, "baton-MB/s")
	b.ReportMetric(mm2MBps, "mm2-MB/s")
	b.ReportMetric(batonCPU, "baton-cpu-s/GiB")
	b.ReportMetric(mm2CPU, "mm2-cpu-s/GiB")
	b.ReportMetric(ratio, "per-cpu-ratio")
	fmt.Fprintf(os.Stderr, `
replicator vs MirrorMaker 2 on Apache Kafka %s (1-broker source, 1-broker destination)
(%d records of 1 KiB in %d partitions, lz4, %.2f GiB of values; timed from process start
 until the destination holds every record; GOMAXPROCS=%d)
                        baton        MM2     ratio
wall time s         %9.2f  %9.2f   %6.2fx
throughput MB/s     %9.1f  %9.1f   %6.2fx
CPU s               %9.2f  %9.2f
CPU s/GiB           %9.2f  %9.2f
MB/s per CPU s      %9.1f  %9.1f   %6.2fx
`, src.Version(), records, partitions, gib, runtime.GOMAXPROCS(0),
		baton.wall.Seconds(), mm2.wall.Seconds(), mm2.wall.Seconds()/baton.wall.Seconds(),
		batonMBps, mm2MBps, batonMBps/mm2MBps,
		baton.cpu.Seconds(), mm2.cpu.Seconds(),
		batonCPU, mm2CPU,
		float64(bytes)/1e6/baton.cpu.Seconds(), float64(bytes)/1e6/mm2.cpu.Seconds(), ratio)
}

// fillSource writes at least size bytes of 1 KiB values (half random, half
// repeated, so lz4 has something to do) to replTopic and returns the
// number of records.
func fillSource(b *testing.B, bootstrap string, size int64) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.DefaultProduceTopic(replTopic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ProducerBatchMaxBytes(1<<20),
		kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	n := (size + recordBytes - 1) / recordBytes
	rng := rand.New(rand.NewPCG(1, 2))
	var failed atomic.Int64
	for i := range n {
		v := make([]byte, recordBytes)
		for j := 0; j < recordBytes/2; j += 8 {
			x := rng.Uint64()
			for k := range 8 {
				v[j+k] = 'a' + byte(x>>(8*k))%26
			}
		}
		copy(v[recordBytes/2:], fmt.Sprintf("record %012d ", i))
		cl.Produce(context.Background(), &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d source records failed", f)
	}
	return n
}

func buildBaton(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "baton")
	build := exec.Command("go", "build", "-o", bin, "github.com/baton-kafka/baton/cmd/baton")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building baton: %v\n%s", err, out)
	}
	return bin
}

type copyRun struct {
	wall time.Duration
	cpu  time.Duration
}

// timeCopy starts the command and waits until topic on dst holds want
// records (sum of end offsets), then reads the process's CPU time and
// stops it.
func timeCopy(b *testing.B, dst, topic string, want int64, mk func() *exec.Cmd) copyRun {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(dst, ",")...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	cmd := mk()
	logPath := filepath.Join(b.TempDir(), "process.log")
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	fail := func(format string, args ...any) {
		tail, _ := os.ReadFile(logPath)
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		b.Fatalf("%s: "+format+"\n--- process log tail ---\n%s", append([]any{filepath.Base(cmd.Path)}, append(args, tail)...)...)
	}
	deadline := start.Add(30 * time.Minute)
	var have int64
	for {
		select {
		case err := <-exited:
			exited <- err
			fail("exited before the copy was done (%d of %d records): %v", have, want, err)
		default:
		}
		ends, err := adm.ListEndOffsets(context.Background(), topic)
		if err == nil {
			have = 0
			ends.Each(func(o kadm.ListedOffset) {
				if o.Err == nil {
					have += o.Offset
				}
			})
			if have >= want {
				break
			}
		}
		if time.Now().After(deadline) {
			fail("only %d of %d records after %v", have, want, time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}
	wall := time.Since(start)
	return copyRun{wall: wall, cpu: processCPU(b, cmd.Process.Pid)}
}

// mm2Properties configures MirrorMaker 2 for one A->B flow of replTopic on
// 1-broker clusters: internal topics with RF 1, no ACL sync, no
// checkpoints or heartbeats, one task per partition, lz4 on the producer
// (as the source batches), no REST listener.
func mm2Properties(a, bBootstrap string) string {
	return fmt.Sprintf(`clusters=A,B
A.bootstrap.servers=%s
B.bootstrap.servers=%s
A->B.enabled=true
B->A.enabled=false
A->B.topics=%s
tasks.max=%d
replication.factor=1
offset-syncs.topic.replication.factor=1
checkpoints.topic.replication.factor=1
heartbeats.topic.replication.factor=1
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
sync.topic.acls.enabled=false
sync.group.offsets.enabled=false
emit.checkpoints.enabled=false
emit.heartbeats.enabled=false
refresh.topics.interval.seconds=5
dedicated.mode.enable.internal.rest=false
B.producer.compression.type=lz4
`, a, bBootstrap, replTopic, partitions)
}

const mm2Log4j = `status=warn
appender.console.type=Console
appender.console.name=STDERR
appender.console.target=SYSTEM_ERR
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=warn
rootLogger.appenderRef.console.ref=STDERR
`
