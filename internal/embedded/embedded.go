// Package embedded owns the in-process Kafka cluster Baton uses for demos,
// `baton dev cluster` and the fast test tier: franz-go's kfake, with a few
// defaults chosen for Baton (loopback ports, auto-created topics).
//
// kfake speaks the Kafka protocol to every client in the matrix, but its SASL
// handshake only works with franz-go (it lacks SaslHandshake v0), so clusters
// started here have no SASL.
package embedded

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Defaults of the options below.
const (
	DefaultBrokers    = 3
	DefaultPartitions = 6
)

// ErrBadOption is returned by Start when an option is out of range.
var ErrBadOption = errors.New("embedded: bad option")

// Cluster is a running embedded Kafka cluster.
type Cluster struct {
	kc    *kfake.Cluster
	addrs []string
}

// Opt configures Start.
type Opt interface{ apply(*config) }

type config struct {
	brokers    int
	firstPort  int
	partitions int
	extra      []kfake.Opt
}

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

// Brokers sets how many brokers the cluster runs, overriding the default of 3.
func Brokers(n int) Opt { return optFunc(func(c *config) { c.brokers = n }) }

// FirstPort makes broker i listen on 127.0.0.1:(port+i), overriding the
// default of a random free port per broker.
func FirstPort(port int) Opt { return optFunc(func(c *config) { c.firstPort = port }) }

// Partitions sets the partition count of auto-created topics, overriding the
// default of 6.
func Partitions(n int) Opt { return optFunc(func(c *config) { c.partitions = n }) }

// KfakeOpts passes options straight to kfake, for tests that need its fault
// levers (kfake.MaxVersions, SASL, ACLs...). They apply after Baton's own.
func KfakeOpts(opts ...kfake.Opt) Opt {
	return optFunc(func(c *config) { c.extra = append(c.extra, opts...) })
}

// Start starts a cluster. The caller MUST Close it.
func Start(opts ...Opt) (*Cluster, error) {
	cfg := config{brokers: DefaultBrokers, partitions: DefaultPartitions}
	for _, o := range opts {
		o.apply(&cfg)
	}
	switch {
	case cfg.brokers < 1:
		return nil, fmt.Errorf("%w: brokers must be at least 1, got %d", ErrBadOption, cfg.brokers)
	case cfg.partitions < 1:
		return nil, fmt.Errorf("%w: partitions must be at least 1, got %d", ErrBadOption, cfg.partitions)
	case cfg.firstPort < 0 || cfg.firstPort+cfg.brokers-1 > 65535:
		return nil, fmt.Errorf("%w: port %d leaves no room for %d brokers", ErrBadOption, cfg.firstPort, cfg.brokers)
	}
	kopts := []kfake.Opt{
		kfake.NumBrokers(cfg.brokers),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(cfg.partitions),
	}
	if cfg.firstPort > 0 {
		ports := make([]int, cfg.brokers)
		for i := range ports {
			ports[i] = cfg.firstPort + i
		}
		kopts = append(kopts, kfake.Ports(ports...))
	}
	kopts = append(kopts, cfg.extra...)
	kc, err := kfake.NewCluster(kopts...)
	if err != nil {
		return nil, fmt.Errorf("embedded: starting kfake: %w", err)
	}
	return &Cluster{kc: kc, addrs: kc.ListenAddrs()}, nil
}

// Addrs returns every broker's host:port.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Bootstrap returns the brokers as a comma-separated bootstrap list.
func (c *Cluster) Bootstrap() string { return strings.Join(c.addrs, ",") }

// Kfake exposes the underlying cluster for fault levers (MoveTopicPartition,
// ControlKey...).
func (c *Cluster) Kfake() *kfake.Cluster { return c.kc }

// Close stops the cluster. It is safe to call more than once.
func (c *Cluster) Close() { c.kc.Close() }
