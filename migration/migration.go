// Package migration owns what the control plane and the agents must agree
// on about a topic's migration: its State (docs/design.md §3), what agents
// do with produce while it is MIGRATING (HoldMode), their mapping to the
// wire (api/baton/v1), the timing defaults of the lease and cutover
// protocol (docs/design.md §5, §6), and the kinds of finding agents report
// with the key both sides keep them by (§12). Both sides take these from
// here, so a default changed in one place changes for both.
package migration

import (
	"errors"
	"fmt"
	"strings"
	"time"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
)

// Defaults of the lease and cutover protocol. The control plane pushes its
// own values to every agent (TopicRoute and lease grants); an agent uses
// these only before it has heard from a control plane, or with static
// routes.
const (
	// DefaultLease is how long a lease lasts. Agents renew at a third of
	// it, and stop forwarding to the source when it runs out.
	DefaultLease = 5 * time.Second
	// DefaultForwardDeadline is F: the longest a forwarded produce may be
	// outstanding before the agent answers it retriable and stops vouching
	// for it. A cutover waits F past a silent agent's lease before it
	// reads the source's end offsets.
	DefaultForwardDeadline = 2 * time.Second
	// DefaultHoldMax is how long a request held in MIGRATING (or for a
	// lease) waits before it is answered retriable: well below client
	// request timeouts (30 s; franz-go about 10 s) and kafkajs's ~9 s of
	// retries.
	DefaultHoldMax = 5 * time.Second
	// UnleasedForward bounds how long after its lease ran out an agent
	// keeps forwarding produce for a topic the source fences at the
	// cutover (TopicRoute.source_fenced): a control-plane outage up to it
	// stalls none of those producers. The bound lets the control plane's
	// bypass detection tell an agent cut off from one that is gone: none
	// writes later than its lease's end plus this plus F.
	UnleasedForward = 10 * time.Minute
	// UnleasedForwardDeadline caps F for produce an agent forwards
	// without a lease (UnleasedForward): the F it holds came from a
	// control plane that may since have restarted with a smaller one, and
	// the cutover's wait after the source fence counts with at least this.
	UnleasedForwardDeadline = DefaultForwardDeadline
)

// Sentinel errors.
var (
	// ErrUnknownState is returned for a state or hold mode name, or a
	// wire value, this package does not define.
	ErrUnknownState = errors.New("migration: unknown state")
)

// State is a topic's migration state. The zero value, Unmanaged, is a
// topic Baton does not manage: agents pass it through to the source, and
// the control plane uses it as the state before an add and after a
// removal.
type State int

// The states, in the order a migration goes through them.
const (
	Unmanaged State = iota
	// Reject: produce goes to the source; the destination's copy is a
	// read-only replica.
	Reject
	// Proxy: agents forward produce to the source, under lease.
	Proxy
	// Migrating: agents stop forwarding and hold or refuse produce while
	// replication drains.
	Migrating
	// Complete: produce goes to the destination. One-way.
	Complete
)

var stateNames = [...]string{Unmanaged: "UNMANAGED", Reject: "REJECT", Proxy: "PROXY", Migrating: "MIGRATING", Complete: "COMPLETE"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// ParseState reads a state name, case-insensitively. UNMANAGED is not a
// state a topic can be set to, so it is refused.
func ParseState(s string) (State, error) {
	for i, n := range stateNames {
		if State(i) != Unmanaged && strings.EqualFold(s, n) {
			return State(i), nil
		}
	}
	return Unmanaged, fmt.Errorf("%w: %q (want REJECT, PROXY, MIGRATING or COMPLETE)", ErrUnknownState, s)
}

// MarshalText writes the state's name.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name; UNMANAGED reads as Unmanaged.
func (s *State) UnmarshalText(b []byte) error {
	if strings.EqualFold(string(b), stateNames[Unmanaged]) {
		*s = Unmanaged
		return nil
	}
	v, err := ParseState(string(b))
	*s = v
	return err
}

// Proto is the state on the wire; Unmanaged is STATE_UNSPECIFIED.
func (s State) Proto() batonv1.State {
	switch s {
	case Reject:
		return batonv1.State_STATE_REJECT
	case Proxy:
		return batonv1.State_STATE_PROXY
	case Migrating:
		return batonv1.State_STATE_MIGRATING
	case Complete:
		return batonv1.State_STATE_COMPLETE
	}
	return batonv1.State_STATE_UNSPECIFIED
}

// FromProto reads a state from the wire. A route always has a state, so
// STATE_UNSPECIFIED, like any value this version does not know, is an
// error.
func FromProto(s batonv1.State) (State, error) {
	switch s {
	case batonv1.State_STATE_REJECT:
		return Reject, nil
	case batonv1.State_STATE_PROXY:
		return Proxy, nil
	case batonv1.State_STATE_MIGRATING:
		return Migrating, nil
	case batonv1.State_STATE_COMPLETE:
		return Complete, nil
	}
	return Unmanaged, fmt.Errorf("%w: %v", ErrUnknownState, s)
}

// HoldMode is what agents do with produce for a MIGRATING topic.
type HoldMode int

const (
	// Hold keeps the request until the topic leaves MIGRATING or its hold
	// max passes (default).
	Hold HoldMode = iota
	// Retriable answers at once with the retriable error.
	Retriable
)

var modeNames = [...]string{Hold: "hold", Retriable: "retriable"}

func (m HoldMode) String() string {
	if m >= 0 && int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("HoldMode(%d)", int(m))
}

// ParseHoldMode reads a hold mode name, case-insensitively; "" is Hold.
func ParseHoldMode(s string) (HoldMode, error) {
	if s == "" {
		return Hold, nil
	}
	for i, n := range modeNames {
		if strings.EqualFold(s, n) {
			return HoldMode(i), nil
		}
	}
	return Hold, fmt.Errorf("%w: hold mode %q (want hold or retriable)", ErrUnknownState, s)
}

// Proto is the hold mode on the wire.
func (m HoldMode) Proto() batonv1.HoldMode {
	if m == Retriable {
		return batonv1.HoldMode_HOLD_MODE_RETRIABLE
	}
	return batonv1.HoldMode_HOLD_MODE_HOLD
}

// HoldModeFromProto reads a hold mode from the wire; anything but
// RETRIABLE holds, the safe default for a value this version does not know.
func HoldModeFromProto(m batonv1.HoldMode) HoldMode {
	if m == batonv1.HoldMode_HOLD_MODE_RETRIABLE {
		return Retriable
	}
	return Hold
}

// FindingKind names what an agent's PROXY-phase check found: the agents
// report findings to the control plane with their heartbeats (the wire's
// Finding.kind), and the cutover gates ask the control plane for them by
// kind.
type FindingKind string

// Finding kinds.
const (
	// FindingAuthMissing: the principal the destination will see after the
	// cutover may not WRITE the topic there (filter/authcheck).
	FindingAuthMissing FindingKind = "auth_missing"
	// FindingHeadroom: a producer will not sustain its rate at the
	// destination's ack latency (filter/headroom).
	FindingHeadroom FindingKind = "headroom"
)

// FindingKey identifies a finding on both sides: an agent keeps one
// finding per key, and the control plane merges what its agents report by
// key and records one event when a key opens. Who is the principal, or
// the client id when the agent did not know the principal.
type FindingKey struct {
	Kind  FindingKind
	Topic string
	Who   string
}

// KeyOfFinding is the key of a finding of kind on topic by principal, or
// by clientID when principal is "".
func KeyOfFinding(kind FindingKind, topic, principal, clientID string) FindingKey {
	who := principal
	if who == "" {
		who = clientID
	}
	return FindingKey{Kind: kind, Topic: topic, Who: who}
}
