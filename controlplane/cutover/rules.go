package cutover

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Agent is what the drain reads of one agent.
type Agent struct {
	Node string
	// GrantedAt is when its lease was last granted (zero: never; it never
	// forwarded); EarlierGrantedAt the last grant of an earlier process of
	// the same agent (restarted).
	GrantedAt, EarlierGrantedAt time.Time
	LastHeartbeat               time.Time
	AckedVersion                uint64
	// Reported says its last heartbeat carried a drain report for the
	// topic: Stopped (it stopped forwarding it) and InFlight (requests it
	// forwarded that are not settled).
	Reported bool
	Stopped  bool
	InFlight int64
}

// DrainSpec is what the drain is of: the MIGRATING version, whether the
// source fence closes the topic, and the topic's route's F (0: none).
type DrainSpec struct {
	Version uint64
	Fenced  bool
	Forward time.Duration
}

// Pending sorts agents by what the drain waits for.
type Pending struct {
	Waiting          []Waiting
	Drained, Expired []string
}

// Waiting is an agent the drain waits for; Why says why.
type Waiting struct {
	Node string
	// why and its values, rendered by Why only when said: the drain runs
	// at every report and poll.
	why         waitReason
	acked, want uint64
	at, safeAt  time.Time
	stopped     bool
	inFlight    int64
}

type waitReason uint8

const (
	waitEarlier waitReason = iota
	waitVersion
	waitInFlight
)

// Why says why the drain waits for the agent.
func (w Waiting) Why() string {
	switch w.why {
	case waitEarlier:
		return fmt.Sprintf("an earlier process of this agent held a lease granted at %s; "+
			"what it sent may still reach the source; safe at %s", w.at.Format(time.RFC3339Nano), w.safeAt.Format(time.RFC3339Nano))
	case waitVersion:
		return fmt.Sprintf("acked version %d < %d; silent-safe at %s", w.acked, w.want, w.safeAt.Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("stopped=%v in_flight=%d", w.stopped, w.inFlight)
}

// Summary says what the drain waits for, one agent after another.
func (p Pending) Summary() string {
	var b strings.Builder
	for i, w := range p.Waiting {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", w.Node, w.Why())
	}
	return b.String()
}

// Drain sorts agents into drained, expired (they can no longer write the
// source) and waiting, at now. An agent is safe once it acked the version,
// stopped forwarding and has nothing in flight, or once it is silent past
// its grant + lease + F (after which nothing it sent can still land); on a
// topic the source fence closes, also once it missed a renewal (two thirds
// of a lease without a heartbeat: the fence refuses what it sends after).
// A restarted agent's earlier process is waited out by the same rule.
func Drain(now time.Time, cfg Config, s DrainSpec, agents []Agent) Pending {
	var p Pending
	// Agents answer a forwarded produce within the F pushed in the topic's
	// route: wait out the larger of it and the control plane's own.
	forward := max(cfg.Forward, s.Forward)
	for _, a := range agents {
		if a.GrantedAt.IsZero() {
			continue // never held a lease: never forwarded
		}
		safeAt := a.GrantedAt.Add(cfg.Lease + forward)
		if !now.Before(safeAt) {
			p.Expired = append(p.Expired, a.Node)
			continue
		}
		if s.Fenced && now.Sub(a.LastHeartbeat) > 2*cfg.Lease/3 {
			p.Expired = append(p.Expired, a.Node)
			continue
		}
		if earlierSafe := a.EarlierGrantedAt.Add(cfg.Lease + forward); !s.Fenced && now.Before(earlierSafe) {
			p.Waiting = append(p.Waiting, Waiting{Node: a.Node, why: waitEarlier, at: a.EarlierGrantedAt, safeAt: earlierSafe})
			continue
		}
		switch {
		case a.AckedVersion < s.Version:
			p.Waiting = append(p.Waiting, Waiting{Node: a.Node, why: waitVersion, acked: a.AckedVersion, want: s.Version, safeAt: safeAt})
		case !a.Reported || !a.Stopped || a.InFlight > 0:
			p.Waiting = append(p.Waiting, Waiting{Node: a.Node, why: waitInFlight, stopped: a.Stopped, inFlight: a.InFlight})
		default:
			p.Drained = append(p.Drained, a.Node)
		}
	}
	slices.SortFunc(p.Waiting, func(a, b Waiting) int { return strings.Compare(a.Node, b.Node) })
	slices.Sort(p.Drained)
	slices.Sort(p.Expired)
	return p
}

// Lease is the outcome of an agent's heartbeat for its lease.
type Lease struct {
	Granted bool
	// GrantedAt and ExpiresAt are the grant the control plane counts
	// (the drain's GrantedAt); Refused says why none was granted.
	GrantedAt, ExpiresAt time.Time
	Refused              string
}

// GrantLease is the lease rule: an agent that acked the required config
// version gets a lease from now, counted from no earlier than counted (a
// grant a control plane that took over counts already, TakeoverGrant;
// zero for none); one below it is refused until it applies it.
func GrantLease(now time.Time, lease time.Duration, acked, required uint64, counted time.Time) Lease {
	if acked < required {
		return Lease{Refused: fmt.Sprintf("acked version %d is below the current config version %d: apply it first", acked, required)}
	}
	at := now
	if counted.After(at) {
		at = counted
	}
	return Lease{Granted: true, GrantedAt: at, ExpiresAt: at.Add(lease)}
}

// TakeoverGrant is the grant a control plane that starts at start counts
// for an agent last stored granted at granted: grants given after the last
// flush were not stored, so until proven otherwise every known agent may
// have been granted a lease at any moment up to start + takeover.
func TakeoverGrant(start time.Time, takeover, lease time.Duration, granted time.Time) (at, expires time.Time, raised bool) {
	if limit := start.Add(takeover); granted.Before(limit) {
		return limit, limit.Add(lease), true
	}
	return granted, granted.Add(lease), false
}

// Recover says what a control plane that starts (or takes over) does with
// a cutover it finds MIGRATING at step, with the attempt's deadline:
// complete it (every step but storing COMPLETE was done, and COMPLETE only
// before the deadline, as the cutover itself would) or roll it back.
func Recover(now time.Time, step Step, deadline time.Time) (complete bool) {
	return step == StepDone && now.Before(deadline)
}

// RollBackMarks says whether a rollback of an attempt at step first
// stores StepRollingBack, durably, so that no control plane taking over
// completes it should storing PROXY fail.
func RollBackMarks(step Step) bool { return step == StepDone }

// Reached reports whether progress (the next offset per partition) is at
// or past ends everywhere; if not, it names a partition behind.
func Reached(progress, ends map[int32]int64) (bool, string) {
	for _, p := range slices.Sorted(maps.Keys(ends)) {
		end := ends[p]
		if end == 0 {
			continue
		}
		if next, ok := progress[p]; !ok || next < end {
			return false, fmt.Sprintf("partition %d at %d of %d", p, next, end)
		}
	}
	return true, ""
}

// FormatOffsets renders offsets per partition in partition order:
// "0:12 1:40".
func FormatOffsets(m map[int32]int64) string {
	var b strings.Builder
	for i, p := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", p, m[p])
	}
	return b.String()
}
