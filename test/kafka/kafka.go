// Package kafka owns Baton's real Apache Kafka test harness: KRaft clusters
// of 1 or 3 nodes (each a combined broker and controller JVM listening on
// 127.0.0.1 only), run from Kafka's own jars, which come from Maven Central
// through pom.xml and fetch.sh beside this file.
//
// Start (or StartT in tests) formats fresh storage with a new cluster id,
// launches one java process per node, and returns once the cluster answers
// Metadata with every broker. Stop ends every process the cluster started
// (SIGTERM, then SIGKILL after a grace) and leaves none behind. Processes
// started by an attached cluster (the default) also die when the calling
// process dies, whatever kills it.
//
// cluster.sh is the shell front end (up, down, status) over the same code:
// it runs cmd/kafkacluster, which starts a Detached cluster whose state lives
// in its directory, and Open finds it again.
//
// Classpath and MirrorClasspath give the java classpaths other harnesses run
// Kafka's tools, the Java client and MirrorMaker 2 with.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults of the options below.
const (
	// DefaultVersion is the pinned Kafka version; pom.xml's kafka.version
	// holds the same pin (a test checks).
	DefaultVersion = "4.4.0"
	// DefaultMirrorVersion is the connect-mirror (MirrorMaker 2) version:
	// Maven Central does not serve connect-mirror 4.4.0, so MirrorMaker 2 is
	// pinned to the newest one it serves. pom.xml's mirror.version matches.
	DefaultMirrorVersion = "4.3.1"
	DefaultBrokers       = 1
	DefaultPartitions    = 6
	// DefaultHeap is each node's JVM -Xmx.
	DefaultHeap = "512m"
	// DefaultStartTimeout bounds Start when its context has no deadline.
	// It is wide: a loaded machine can take minutes, and a start that is
	// stuck fails sooner, at StartStall.
	DefaultStartTimeout = 10 * time.Minute
	// StartStall fails a start that is not ready and whose nodes have
	// logged nothing for this long: progress, not the machine's speed,
	// decides how long a start may take.
	StartStall = 90 * time.Second
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL.
	StopGrace = 20 * time.Second
)

// Opt configures Start.
type Opt interface{ apply(*config) }

type config struct {
	brokers    int
	firstPort  int
	partitions int
	version    string
	dir        string
	heap       string
	detached   bool
	extra      [][2]string
	clientOpts []kgo.Opt
}

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

// Brokers sets how many nodes the cluster runs, each a combined broker and
// controller; the default is 1. Only 1 and 3 are allowed (a KRaft quorum of
// 2 tolerates no failure and gains nothing over 1).
func Brokers(n int) Opt { return optFunc(func(c *config) { c.brokers = n }) }

// FirstPort makes node i (from 0) serve clients on 127.0.0.1:(p+i) and its
// controller on 127.0.0.1:(p+n+i), n being the node count. The default picks
// free loopback ports (and retries with new ones if another process takes
// one first).
func FirstPort(p int) Opt { return optFunc(func(c *config) { c.firstPort = p }) }

// Partitions sets num.partitions, the partition count of auto-created
// topics; the default is 6.
func Partitions(n int) Opt { return optFunc(func(c *config) { c.partitions = n }) }

// Version picks the Kafka version whose jars run the cluster; the default is
// DefaultVersion (4.4.0). Another version is fetched from Maven Central on
// first use.
func Version(v string) Opt { return optFunc(func(c *config) { c.version = v }) }

// Dir puts the cluster's state (one node-<id> folder per node with its
// server.properties, data and server.log, plus cluster.json) under d, which
// is created if missing; any earlier node folders in it are wiped. The
// default is a new temporary folder that Stop removes (StartT uses
// t.TempDir()); a folder given here is kept.
func Dir(d string) Opt { return optFunc(func(c *config) { c.dir = d }) }

// BrokerConfig sets one server.properties key on every node, overriding the
// harness's value if it has one. Later calls win. The value may span lines
// (a PEM certificate or key inline): it is escaped as Java properties
// want.
func BrokerConfig(key, value string) Opt {
	return optFunc(func(c *config) { c.extra = append(c.extra, [2]string{key, value}) })
}

// ClientOpts are added to the franz-go client that checks the cluster is
// ready (default none), e.g. SASL when BrokerConfig puts the brokers'
// listener behind it.
func ClientOpts(opts ...kgo.Opt) Opt {
	return optFunc(func(c *config) { c.clientOpts = append(c.clientOpts, opts...) })
}

// Heap sets each node's JVM -Xmx; the default is DefaultHeap (512m).
func Heap(h string) Opt { return optFunc(func(c *config) { c.heap = h }) }

// Detached starts the nodes in their own session so that they outlive the
// calling process, which is what cluster.sh needs; by default they die with
// it. Stop, or Open(dir) then Stop from any process, ends them.
func Detached() Opt { return optFunc(func(c *config) { c.detached = true }) }

// Node is one KRaft node of a cluster.
type Node struct {
	ID             int    `json:"id"`
	Port           int    `json:"port"`
	ControllerPort int    `json:"controller_port"`
	Dir            string `json:"dir"`
	PID            int    `json:"pid"`
}

// Addr is the node's client address.
func (n Node) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.Port) }

// Log is the path of the node's log (its stdout and stderr).
func (n Node) Log() string { return filepath.Join(n.Dir, "server.log") }

// Cluster is a running Kafka cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	dir       string
	version   string
	clusterID string
	nodes     []Node
	procs     []*proc // nil entries for a cluster found by Open
	removeDir bool
	portLocks portLocks // released by Stop

	// What RestartNode starts a node with (unset for a cluster found by
	// Open).
	cfg      config
	java, cp string

	stopOnce sync.Once
	stopErr  error
}

// Bootstrap returns the nodes' client addresses, comma-separated.
func (c *Cluster) Bootstrap() string { return strings.Join(c.Addrs(), ",") }

// Addrs returns every node's client address (127.0.0.1:port).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Nodes describes the cluster's nodes.
func (c *Cluster) Nodes() []Node { return append([]Node(nil), c.nodes...) }

// Dir is the folder holding the cluster's state and logs.
func (c *Cluster) Dir() string { return c.dir }

// ClusterID is the id the storage was formatted with.
func (c *Cluster) ClusterID() string { return c.clusterID }

// Version is the Kafka version the cluster runs.
func (c *Cluster) Version() string { return c.version }

// LogTail returns the last n lines of every node's log, each under a header
// naming the node. It is empty once Stop has removed a temporary folder.
func (c *Cluster) LogTail(n int) string { return logTail(c.nodes, n) }

// Stop ends every process of the cluster: SIGTERM to each node's process
// group, SIGKILL after StopGrace, then SIGKILL to any process left whose
// command line names the cluster's folder. It waits until they are gone.
// Stop is idempotent; later calls return the first call's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	var wg sync.WaitGroup
	errc := make(chan error, len(c.nodes))
	for i, n := range c.nodes {
		var p *proc
		if i < len(c.procs) {
			p = c.procs[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := stopNode(n, p, StopGrace); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		errs = append(errs, err)
	}
	if err := killStragglers(c.dir); err != nil {
		errs = append(errs, err)
	}
	c.portLocks.release()
	if len(errs) == 0 {
		_ = os.Remove(filepath.Join(c.dir, stateFile))
		if c.removeDir {
			if err := os.RemoveAll(c.dir); err != nil {
				errs = append(errs, fmt.Errorf("kafka: removing %s: %w", c.dir, err))
			}
		}
	}
	return errors.Join(errs...)
}

// StartT starts a cluster for a test, in t.TempDir() unless Dir is given. It
// fails the test (with the nodes' log tail) if the cluster does not come up,
// and registers t.Cleanup to Stop it, logging the log tail first if the test
// failed.
func StartT(t testing.TB, opts ...Opt) *Cluster {
	t.Helper()
	cfg := newConfig(opts)
	if cfg.dir == "" {
		opts = append(opts, Dir(t.TempDir()))
	}
	ctx, cancel := context.WithTimeout(t.Context(), DefaultStartTimeout)
	defer cancel()
	c, err := Start(ctx, opts...)
	if err != nil {
		t.Fatalf("kafka.StartT: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafka cluster in %s, log tail:\n%s", c.Dir(), c.LogTail(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("kafka: stopping cluster: %v", err)
		}
	})
	return c
}

func newConfig(opts []Opt) config {
	cfg := config{
		brokers:    DefaultBrokers,
		partitions: DefaultPartitions,
		version:    DefaultVersion,
		heap:       DefaultHeap,
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	return cfg
}

func (cfg config) validate() error {
	switch {
	case cfg.brokers != 1 && cfg.brokers != 3:
		return fmt.Errorf("%w: Brokers must be 1 or 3, got %d", ErrBadOption, cfg.brokers)
	case cfg.partitions < 1:
		return fmt.Errorf("%w: Partitions must be at least 1, got %d", ErrBadOption, cfg.partitions)
	case cfg.firstPort < 0 || cfg.firstPort+2*cfg.brokers-1 > 65535:
		return fmt.Errorf("%w: FirstPort %d leaves no room for %d client and controller ports", ErrBadOption, cfg.firstPort, 2*cfg.brokers)
	case cfg.version == "" || strings.ContainsAny(cfg.version, "/ \t\n"):
		return fmt.Errorf("%w: bad Version %q", ErrBadOption, cfg.version)
	case cfg.heap == "":
		return fmt.Errorf("%w: empty Heap", ErrBadOption)
	}
	for _, kv := range cfg.extra {
		if kv[0] == "" || strings.ContainsAny(kv[0], "=:\n ") {
			return fmt.Errorf("%w: bad BrokerConfig %q=%q", ErrBadOption, kv[0], kv[1])
		}
	}
	return nil
}
