package kafka

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	stateFile = "cluster.json"
	log4jFile = "log4j2.properties"
)

// Start formats and starts a cluster and returns once it answers Metadata
// listing every broker. ctx bounds the start (DefaultStartTimeout if it has
// no deadline), not the cluster's life: call Stop. On error nothing is left
// running and the error carries the nodes' log tail.
func Start(ctx context.Context, opts ...Opt) (*Cluster, error) {
	cfg := newConfig(opts)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	java, err := Java()
	if err != nil {
		return nil, err
	}
	cp, err := classpathFor(ctx, "kafka", cfg.version)
	if err != nil {
		return nil, err
	}

	dir, removeDir := cfg.dir, false
	if dir == "" {
		if dir, err = os.MkdirTemp("", "baton-kafka-*"); err != nil {
			return nil, fmt.Errorf("kafka: %w", err)
		}
		removeDir = !cfg.detached
	} else {
		if dir, err = filepath.Abs(dir); err != nil {
			return nil, fmt.Errorf("kafka: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("kafka: %w", err)
		}
		if old, err := Open(dir); err == nil && len(old.Alive()) > 0 {
			return nil, fmt.Errorf("kafka: a cluster (%s) is already running in %s; stop it first (cluster.sh down --dir %s)", old.Bootstrap(), dir, dir)
		}
	}

	attempts := 1
	if cfg.firstPort == 0 {
		attempts = 3 // free ports can be taken between picking and binding
	}
	for attempt := 1; ; attempt++ {
		ports, locks, err := pickPorts(cfg)
		if err != nil {
			if removeDir {
				_ = os.RemoveAll(dir)
			}
			return nil, err
		}
		c, err := launch(ctx, cfg, dir, ports, java, cp)
		if err == nil {
			c.removeDir = removeDir
			c.portLocks = locks
			return c, nil
		}
		locks.release()
		if attempt >= attempts || !errors.Is(err, errPortInUse) || ctx.Err() != nil {
			if removeDir {
				_ = os.RemoveAll(dir)
			}
			return nil, err
		}
	}
}

// pickPorts returns 2n ports, n client ports then n controller ports, and
// the locks reserving them (none for fixed ports).
func pickPorts(cfg config) ([]int, portLocks, error) {
	n := 2 * cfg.brokers
	if cfg.firstPort > 0 {
		ports := make([]int, n)
		for i := range ports {
			ports[i] = cfg.firstPort + i
		}
		return ports, nil, nil
	}
	return reservePorts(n)
}

// launch does one attempt at starting the cluster in dir.
func launch(ctx context.Context, cfg config, dir string, ports []int, java, cp string) (c *Cluster, err error) {
	// A fresh start: earlier node folders go.
	old, _ := filepath.Glob(filepath.Join(dir, "node-*"))
	for _, o := range old {
		if err := os.RemoveAll(o); err != nil {
			return nil, fmt.Errorf("kafka: wiping %s: %w", o, err)
		}
	}
	_ = os.Remove(filepath.Join(dir, stateFile))

	c = &Cluster{dir: dir, version: cfg.version, clusterID: randomUUID(), cfg: cfg, java: java, cp: cp}
	n := cfg.brokers
	for i := range n {
		c.nodes = append(c.nodes, Node{
			ID:             i + 1,
			Port:           ports[i],
			ControllerPort: ports[n+i],
			Dir:            filepath.Join(dir, fmt.Sprintf("node-%d", i+1)),
		})
	}
	defer func() {
		if err == nil {
			return
		}
		tail := c.LogTail(30)
		if serr := c.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		if logSays(c.nodes, "Address already in use") {
			err = fmt.Errorf("%w (%w)", err, errPortInUse)
		}
		err = fmt.Errorf("%w\nnode log tail:\n%s", err, tail)
	}()

	if err := os.WriteFile(filepath.Join(dir, log4jFile), []byte(log4jConfig), 0o644); err != nil {
		return c, fmt.Errorf("kafka: %w", err)
	}
	for _, nd := range c.nodes {
		if err := os.MkdirAll(nd.Dir, 0o755); err != nil {
			return c, fmt.Errorf("kafka: %w", err)
		}
		if err := os.WriteFile(propsPath(nd), []byte(serverProperties(cfg, c.nodes, nd)), 0o644); err != nil {
			return c, fmt.Errorf("kafka: %w", err)
		}
	}

	// Format every node's storage at once (one short JVM each).
	var wg sync.WaitGroup
	ferrs := make([]error, n)
	for i, nd := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ferrs[i] = format(ctx, java, cp, c.clusterID, nd)
		}()
	}
	wg.Wait()
	if err := errors.Join(ferrs...); err != nil {
		return c, err
	}

	for _, nd := range c.nodes {
		p, err := startNode(cfg, dir, java, cp, nd)
		if err != nil {
			return c, err
		}
		c.procs = append(c.procs, p)
		c.nodes[len(c.procs)-1].PID = p.pid()
	}
	if err := c.writeState(cfg.detached); err != nil {
		return c, err
	}
	if err := c.waitReady(ctx); err != nil {
		return c, err
	}
	return c, nil
}

func propsPath(nd Node) string { return filepath.Join(nd.Dir, "server.properties") }

func format(ctx context.Context, java, cp, clusterID string, nd Node) error {
	logPath := filepath.Join(nd.Dir, "format.log")
	f, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer f.Close()
	cmd := exec.Command(java, "-Xmx256m", "-XX:TieredStopAtLevel=1",
		"-Dlog4j2.configurationFile="+filepath.Join(filepath.Dir(nd.Dir), log4jFile),
		"-Dbaton.kafka.node="+nd.Dir+"/",
		"-cp", cp, "kafka.tools.StorageTool", "format",
		"--cluster-id", clusterID, "--config", propsPath(nd))
	cmd.Stdout, cmd.Stderr = f, f
	if err := runAttached(ctx, cmd); err != nil {
		out, _ := tailFile(logPath, 20)
		return fmt.Errorf("kafka: formatting node %d storage (kafka.tools.StorageTool): %w\n%s", nd.ID, err, out)
	}
	return nil
}

func startNode(cfg config, dir, java, cp string, nd Node) (*proc, error) {
	f, err := os.OpenFile(nd.Log(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(java,
		"-Xms128m", "-Xmx"+cfg.heap,
		"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
		// C1 only: a test cluster's brokers live for minutes at modest
		// rates, where the C2 compiler's work never pays back. Measured on
		// a 3-node cluster: start 16 -> 10 CPU-seconds, 20k 1 KiB records
		// 9.2 -> 6.3.
		"-XX:TieredStopAtLevel=1",
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile="+filepath.Join(dir, log4jFile),
		"-Dkafka.logs.dir="+nd.Dir,
		"-Dbaton.kafka.node="+nd.Dir+"/",
		"-cp", cp, "kafka.Kafka", propsPath(nd))
	cmd.Dir = nd.Dir
	cmd.Stdout, cmd.Stderr = f, f
	p, err := startProc(cmd, cfg.detached)
	if err != nil {
		return nil, fmt.Errorf("kafka: starting node %d: %w", nd.ID, err)
	}
	return p, nil
}

// waitReady polls until Ready succeeds, a node exits, the nodes log
// nothing for StartStall, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	logged, progressAt := int64(-1), time.Now()
	for {
		for i, p := range c.procs {
			if ok, werr := p.exited(); ok {
				return fmt.Errorf("kafka: node %d exited during start (%v); see %s", c.nodes[i].ID, werr, c.nodes[i].Log())
			}
		}
		err := c.ready(ctx, cl)
		if err == nil {
			return nil
		}
		if n := c.loggedBytes(); n != logged {
			logged, progressAt = n, time.Now()
		} else if time.Since(progressAt) > StartStall {
			return fmt.Errorf("kafka: cluster at %s not ready and its nodes logged nothing for %v (last: %v)", c.Bootstrap(), StartStall, err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("kafka: cluster at %s not ready: %w (last: %v)", c.Bootstrap(), ctx.Err(), err)
		}
	}
}

// loggedBytes is the size of every node's log together: it grows while
// the nodes make progress.
func (c *Cluster) loggedBytes() int64 {
	var n int64
	for _, nd := range c.nodes {
		if fi, err := os.Stat(nd.Log()); err == nil {
			n += fi.Size()
		}
	}
	return n
}

func (c *Cluster) client() (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs()...), kgo.DialTimeout(2 * time.Second)}, c.cfg.clientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: franz-go client for %s: %w", c.Bootstrap(), err)
	}
	return cl, nil
}

// Ready returns nil if every node's address answers a Metadata request
// with this cluster's id and every node, at its own port, as a broker.
func (c *Cluster) Ready(ctx context.Context) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	return c.ready(ctx, cl)
}

func (c *Cluster) ready(ctx context.Context, cl *kgo.Client) error {
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	want := make(map[int32]int, len(c.nodes))
	for _, nd := range c.nodes {
		want[int32(nd.ID)] = nd.Port
	}
	// Ask each seed (each node's own address) directly: by node id the
	// client would go wherever metadata says, and a foreign broker that
	// took one of our ports would answer for a foreign cluster. The
	// cluster id and the broker list tell a foreign broker apart.
	for _, seed := range cl.SeedBrokers() {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{} // brokers only
		resp, err := req.RequestWith(rctx, seed)
		if err != nil {
			return fmt.Errorf("metadata from a node: %w", err)
		}
		if resp.ClusterID == nil || *resp.ClusterID != c.clusterID {
			got := "none"
			if resp.ClusterID != nil {
				got = *resp.ClusterID
			}
			return fmt.Errorf("a node of %s answers for cluster %s, not %s (is another broker on one of its ports?)", c.Bootstrap(), got, c.clusterID)
		}
		listed := make([]string, len(resp.Brokers))
		match := len(resp.Brokers) == len(want)
		for i, b := range resp.Brokers {
			listed[i] = fmt.Sprintf("%d@%s:%d", b.NodeID, b.Host, b.Port)
			if p, ok := want[b.NodeID]; !ok || int(b.Port) != p {
				match = false
			}
		}
		if !match {
			return fmt.Errorf("a node lists brokers %v, want the %d of %s", listed, len(c.nodes), c.Bootstrap())
		}
	}
	return nil
}

// state is cluster.json, what Open reads back.
type state struct {
	Version   string    `json:"version"`
	ClusterID string    `json:"cluster_id"`
	Detached  bool      `json:"detached"`
	Started   time.Time `json:"started"`
	Nodes     []Node    `json:"nodes"`
}

func (c *Cluster) writeState(detached bool) error {
	b, err := json.MarshalIndent(state{
		Version: c.version, ClusterID: c.clusterID, Detached: detached,
		Started: time.Now().UTC(), Nodes: c.nodes,
	}, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	return os.Rename(tmp, filepath.Join(c.dir, stateFile))
}

// Open finds the cluster a Start (typically cluster.sh up) left in dir, from
// its cluster.json; it returns an error wrapping ErrNoCluster if there is
// none (Stop removes it). Some or all nodes may have died since: see Alive.
// Stop on the result ends the nodes by their recorded pids, each checked
// against its command line first since pids get reused, then any java
// process left that names dir.
func Open(dir string) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w %s (no %s)", ErrNoCluster, dir, stateFile)
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("kafka: reading %s: %w", filepath.Join(dir, stateFile), err)
	}
	return &Cluster{dir: dir, version: st.Version, clusterID: st.ClusterID, nodes: st.Nodes}, nil
}

// Alive returns the ids of the nodes whose process is running.
func (c *Cluster) Alive() []int {
	var ids []int
	for i, nd := range c.nodes {
		alive := false
		if i < len(c.procs) && c.procs[i] != nil {
			ok, _ := c.procs[i].exited()
			alive = !ok
		} else {
			alive = nd.PID > 0 && isNodeProcess(nd.PID, nd.Dir)
		}
		if alive {
			ids = append(ids, nd.ID)
		}
	}
	sort.Ints(ids)
	return ids
}

func logSays(nodes []Node, s string) bool {
	for _, nd := range nodes {
		b, err := os.ReadFile(nd.Log())
		if err == nil && strings.Contains(string(b), s) {
			return true
		}
	}
	return false
}

// randomUUID returns a Kafka Uuid string (16 random bytes, URL-safe base64
// without padding), avoiding the reserved ids and a leading '-' as
// org.apache.kafka.common.Uuid.randomUuid does.
func randomUUID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		s := base64.RawURLEncoding.EncodeToString(b[:])
		zero := true
		for _, x := range b[:15] {
			zero = zero && x == 0
		}
		if zero && b[15] <= 2 || strings.HasPrefix(s, "-") {
			continue
		}
		return s
	}
}
