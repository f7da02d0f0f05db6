package kafka_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/test/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestThreeBrokers(t *testing.T) {
	t.Parallel()
	testCluster(t, 3)
}

func TestOneBroker(t *testing.T) {
	t.Parallel()
	testCluster(t, 1)
}

// testCluster starts n brokers, checks Metadata, round-trips a record,
// stops the cluster and checks that no java process of it is left.
func testCluster(t *testing.T, n int) {
	start := time.Now()
	c := kafka.StartT(t, kafka.Brokers(n), kafka.Partitions(3))
	t.Logf("%d-broker cluster at %s started in %v", n, c.Bootstrap(), time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	if got := len(c.Addrs()); got != n {
		t.Fatalf("Addrs() = %v, want %d addresses", c.Addrs(), n)
	}
	if want := strings.Join(c.Addrs(), ","); c.Bootstrap() != want {
		t.Fatalf("Bootstrap() = %q, want %q", c.Bootstrap(), want)
	}
	pids, err := kafka.Processes(c.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != n {
		t.Fatalf("java processes under %s: %v, want %d", c.Dir(), pids, n)
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.Addrs()...),
		kgo.DefaultProduceTopic("harness"),
		kgo.AllowAutoTopicCreation(),
		// A topic created on first produce reaches every broker's
		// metadata when the controller gets to it: on a loaded machine
		// that can take more than franz-go's default of four metadata
		// loads, so retry until ctx ends instead.
		kgo.UnknownTopicRetries(-1),
		kgo.ConsumeTopics("harness"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("metadata: %v", err)
	}
	if len(md.Brokers) != n {
		t.Fatalf("metadata lists brokers %v, want %d", md.Brokers.NodeIDs(), n)
	}
	if md.Cluster != c.ClusterID() {
		t.Errorf("metadata cluster id %q, want %q", md.Cluster, c.ClusterID())
	}

	rec := &kgo.Record{Key: []byte("k"), Value: []byte("hello " + c.Bootstrap())}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	got := false
	for !got {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume: no record before %v", err)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Logf("fetch %s/%d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) == string(rec.Value) && r.Partition == rec.Partition && r.Offset == rec.Offset {
				got = true
			}
		})
	}

	td, err := adm.ListTopics(ctx, "harness")
	if err != nil {
		t.Fatal(err)
	}
	d := td["harness"]
	if len(d.Partitions) != 3 {
		t.Errorf("harness has %d partitions, want 3 (Partitions option)", len(d.Partitions))
	}
	for _, p := range d.Partitions {
		if len(p.Replicas) != n {
			t.Errorf("harness/%d has replicas %v, want %d", p.Partition, p.Replicas, n)
		}
	}

	if n > 1 {
		// A node killed and brought back: the others keep serving.
		victim := c.Nodes()[1].ID
		if err := c.StopNode(victim, 0); err != nil {
			t.Fatalf("StopNode(%d): %v", victim, err)
		}
		if pids, err := kafka.Processes(c.Dir()); err != nil || len(pids) != n-1 {
			t.Fatalf("java processes after StopNode: %v (%v), want %d", pids, err, n-1)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("while a node is down")}).FirstErr(); err != nil {
			t.Fatalf("produce with node %d down: %v", victim, err)
		}
		if err := c.RestartNode(ctx, victim); err != nil {
			t.Fatalf("RestartNode(%d): %v", victim, err)
		}
		if pids, err := kafka.Processes(c.Dir()); err != nil || len(pids) != n {
			t.Fatalf("java processes after RestartNode: %v (%v), want %d", pids, err, n)
		}
		if err := c.RestartNode(ctx, victim); err == nil {
			t.Fatal("RestartNode of a running node succeeded")
		}
	}
	cl.Close()

	stop := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stopped in %v", time.Since(stop).Round(time.Millisecond))
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if pids, err := kafka.Processes(c.Dir()); err != nil || len(pids) != 0 {
		t.Fatalf("java processes of the cluster after Stop: %v (%v)", pids, err)
	}
	for _, nd := range c.Nodes() {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(nd.PID) + "/cmdline"); err == nil && strings.Contains(string(b), c.Dir()) {
			t.Errorf("node %d (pid %d) still exists after Stop", nd.ID, nd.PID)
		}
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []kafka.Opt
	}{
		{"two brokers", []kafka.Opt{kafka.Brokers(2)}},
		{"zero brokers", []kafka.Opt{kafka.Brokers(0)}},
		{"zero partitions", []kafka.Opt{kafka.Partitions(0)}},
		{"port past 65535", []kafka.Opt{kafka.Brokers(3), kafka.FirstPort(65532)}},
		{"bad config key", []kafka.Opt{kafka.BrokerConfig("a=b", "c")}},
	} {
		_, err := kafka.Start(t.Context(), tc.opts...)
		if !errors.Is(err, kafka.ErrBadOption) {
			t.Errorf("%s: Start = %v, want ErrBadOption", tc.name, err)
		}
	}
}

// TestPins checks that the Go defaults and pom.xml pin the same versions.
func TestPins(t *testing.T) {
	t.Parallel()
	pom, err := os.ReadFile("pom.xml")
	if err != nil {
		t.Fatal(err)
	}
	for prop, want := range map[string]string{
		"kafka.version":  kafka.DefaultVersion,
		"mirror.version": kafka.DefaultMirrorVersion,
	} {
		m := regexp.MustCompile(`<` + regexp.QuoteMeta(prop) + `>([^<]+)</`).FindSubmatch(pom)
		if m == nil || string(m[1]) != want {
			t.Errorf("pom.xml %s = %q, Go default %q", prop, m, want)
		}
	}
}

// TestClasspath checks concurrent Classpath calls agree and name the jars
// the harness and the Java driver need.
func TestClasspath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	res := make(chan string, 4)
	errc := make(chan error, 4)
	for range 4 {
		go func() {
			cp, err := kafka.Classpath(ctx)
			res <- cp
			errc <- err
		}()
	}
	var first string
	for i := range 4 {
		cp, err := <-res, <-errc
		if err != nil {
			t.Fatalf("Classpath: %v", err)
		}
		if i == 0 {
			first = cp
		} else if cp != first {
			t.Fatalf("Classpath differs between concurrent callers")
		}
	}
	for _, jar := range []string{
		"kafka_2.13-" + kafka.DefaultVersion + ".jar",
		"kafka-tools-" + kafka.DefaultVersion + ".jar",
		"kafka-clients-" + kafka.DefaultVersion + ".jar",
		"log4j-slf4j2-impl-",
	} {
		if !strings.Contains(first, "/"+jar) {
			t.Errorf("Classpath lacks %s", jar)
		}
	}
	mcp, err := kafka.MirrorClasspath(ctx)
	if err != nil {
		t.Fatalf("MirrorClasspath: %v", err)
	}
	for _, jar := range []string{"connect-mirror-" + kafka.DefaultMirrorVersion + ".jar", "connect-runtime-" + kafka.DefaultMirrorVersion + ".jar"} {
		if !strings.Contains(mcp, "/"+jar) {
			t.Errorf("MirrorClasspath lacks %s", jar)
		}
	}
}
