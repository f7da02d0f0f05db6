// Package rollout owns the per-namespace rollout: which namespaces write
// each managed topic, as the agents' heartbeats report it (Writers), and
// the waves of namespaces whose topics are cut over together (Job). A
// topic has one writing cluster at a time, so a wave moves only the PROXY
// topics whose every writer namespace is in this wave or an earlier one:
// a topic written from a and b moves with the later of the two.
//
// It drives the control plane through the small Plane interface and starts
// every cutover with its Migrate, as `baton topic migrate` does; package
// controlplane does not import it, and reaches the writer bookkeeping only
// through its controlplane.ReportObserver option.
//
// What is kept is in memory: the writers are learnt again from the next
// heartbeat that carries a write after a restart, and the waves run are
// forgotten (a wave request names earlier namespaces with After then).
package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/baton-kafka/baton/controlplane"
)

// Errors. A refusal of a request's field wraps controlplane.ErrBadConfig
// instead, and names the field.
var (
	// ErrWaveRefused: a wave asked for before the conditions of the wave
	// before it hold (WaveUntil); the message names each one unmet.
	ErrWaveRefused = errors.New("rollout: wave refused")
)

// Plane is what the rollout needs of the control plane: the topics and
// their states, the agents and their namespaces, the newest forgotten
// producer seen on a topic, and starting a topic's cutover.
type Plane interface {
	// Version is the current config version, which agents must ack.
	Version() uint64
	// Topics returns every managed topic.
	Topics() []controlplane.Topic
	// Topic returns one managed topic (controlplane.ErrUnknownTopic).
	Topic(name string) (controlplane.Topic, error)
	// Agents returns every agent known.
	Agents() []controlplane.AgentView
	// LastBypass reports the newest producer seen writing topic's source
	// around the agents: when, and what.
	LastBypass(topic string) (when time.Time, what string, ok bool)
	// Migrate starts topic's cutover, forced past the gates force names.
	Migrate(ctx context.Context, name, actor string, force ...controlplane.Gate) (controlplane.Topic, error)
}

var _ Plane = controlPlane{}

// PlaneOf is cp as the rollout's Plane: its topics, agents and cutovers,
// and its shadow job's bypasses.
func PlaneOf(cp *controlplane.ControlPlane) Plane { return controlPlane{cp} }

type controlPlane struct{ *controlplane.ControlPlane }

func (p controlPlane) LastBypass(topic string) (time.Time, string, bool) {
	return p.Shadow().LastBypass(topic)
}

// DefaultWriterMemory is how long an agent counts as a writer of a topic
// after its last reported write of it, lease or not: an agent restarting,
// cut off a while, or not yet heard from by a new leader still holds its
// topics back from a wave that does not include its namespace.
const DefaultWriterMemory = time.Hour

// Opt configures New.
type Opt interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	writerMemory    time.Duration
	forgottenWindow time.Duration
	now             func() time.Time
}

// WriterMemory sets how long an agent counts as a writer of a topic after
// its last reported write of it (default DefaultWriterMemory); while it
// holds its lease it counts regardless. The memory is the rollout's own:
// it starts over at a restart.
func WriterMemory(d time.Duration) Opt { return optFunc(func(c *config) { c.writerMemory = d }) }

// ForgottenProducerWindow sets how recently a producer must have written a
// topic's source around the agents for the rollout to show it and for a
// wave's NoForgottenProducers to hold the next wave (default
// controlplane.DefaultForgottenProducerWindow; 0: however long ago). Give
// it the control plane's own (controlplane.ForgottenProducerWindow), so
// the rollout holds a wave exactly while the gate would refuse the topic.
func ForgottenProducerWindow(d time.Duration) Opt {
	return optFunc(func(c *config) { c.forgottenWindow = d })
}

// Clock sets the rollout's clock (default time.Now). Give it the control
// plane's (controlplane.Clock): leases, writes and completions are
// compared on it.
func Clock(now func() time.Time) Opt { return optFunc(func(c *config) { c.now = now }) }

// Job is a control plane's rollout: the waves it ran, on the writers its
// Writers learnt.
type Job struct {
	plane   Plane
	writers *Writers
	cfg     config

	// runs serialises RunWave: the check of the wave before and the
	// record of this one are one step, or two waves asked for at once
	// both pass the check and one record is lost. Held across Migrate and
	// mu: neither is ever held when it is taken.
	runs  sync.Mutex
	mu    sync.Mutex
	waves []WaveRun
}

// New returns the rollout of plane, on the writers w learns from plane's
// heartbeats (w given to the plane as its controlplane.ObserveReports).
func New(plane Plane, w *Writers, opts ...Opt) (*Job, error) {
	cfg := config{writerMemory: DefaultWriterMemory, forgottenWindow: controlplane.DefaultForgottenProducerWindow, now: time.Now}
	for _, o := range opts {
		o.apply(&cfg)
	}
	switch {
	case plane == nil || w == nil:
		return nil, fmt.Errorf("%w: a rollout needs a control plane and its writers", controlplane.ErrBadConfig)
	case cfg.writerMemory < 0:
		return nil, fmt.Errorf("%w: rollout writer memory %v is negative", controlplane.ErrBadConfig, cfg.writerMemory)
	case cfg.forgottenWindow < 0:
		return nil, fmt.Errorf("%w: forgotten producer window %v is negative", controlplane.ErrBadConfig, cfg.forgottenWindow)
	}
	return &Job{plane: plane, writers: w, cfg: cfg}, nil
}

// bypass is topic's last forgotten producer within the window.
func (j *Job) bypass(topic string, now time.Time) (time.Time, string, bool) {
	at, what, ok := j.plane.LastBypass(topic)
	if !ok || (j.cfg.forgottenWindow != 0 && now.Sub(at) > j.cfg.forgottenWindow) {
		return time.Time{}, "", false
	}
	return at, what, true
}
