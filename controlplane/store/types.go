package store

import (
	"time"

	"github.com/baton-kafka/baton/controlplane/cutover"
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
	"github.com/baton-kafka/baton/xds"
)

// What the store keeps: the topics, the agents' lease state and the
// audit log's events.

// Shadow switches the PROXY shadow-destination features (docs/design.md §12):
// latency emulation, the auth check and its enforcement, and the headroom
// check are built; Tagging is pushed to agents but no agent acts on it.
type Shadow struct {
	LatencyEmulation bool `json:"latencyEmulation,omitempty"`
	AuthCheck        bool `json:"authCheck,omitempty"`
	AuthEnforce      bool `json:"authEnforce,omitempty"`
	Tagging          bool `json:"tagging,omitempty"`
	Headroom         bool `json:"headroom,omitempty"`
}

// TopicSpec is what an operator sets when adding a topic.
type TopicSpec struct {
	Name string `json:"name"`
	// State is REJECT or PROXY (default PROXY).
	State migration.State `json:"state"`
	// Source and Destination name clusters (default: the control plane's).
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination,omitempty"`
	// Mode is "hold" (default) or "retriable".
	Mode            string        `json:"mode,omitempty"`
	HoldMax         time.Duration `json:"holdMax,omitempty"`
	ForwardDeadline time.Duration `json:"forwardDeadline,omitempty"`
	Target          xds.Target    `json:"target"`
	Shadow          Shadow        `json:"shadow"`
}

// Cutover is an in-flight cutover attempt, kept with its topic.
type Cutover struct {
	Attempt   int          `json:"attempt"`
	Version   uint64       `json:"version"`
	StartedAt time.Time    `json:"startedAt"`
	Deadline  time.Time    `json:"deadline"`
	Actor     string       `json:"actor"`
	Step      cutover.Step `json:"step"`
}

// Topic is a managed topic as stored.
type Topic struct {
	TopicSpec
	// Version is the config version at which the topic's route last changed.
	Version   uint64    `json:"version"`
	Attempts  int       `json:"attempts"`
	Cutover   *Cutover  `json:"cutover,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
	// SourceBatches are, once COMPLETE, the last batches of each
	// idempotent source producer the replicator copied before the cutover,
	// kept in the route until SourceBatchesUntil: no client retries a
	// batch longer, and every agent's route would carry them for good.
	SourceBatches      []replicator.SourceBatch `json:"sourceBatches,omitempty"`
	SourceBatchesUntil time.Time                `json:"sourceBatchesUntil,omitzero"`
	// FenceAtCutover: the topic's routes tell agents the source is fenced
	// at its cutover, so an agent without a lease may keep forwarding it in
	// REJECT and PROXY. Set when a control plane with a source fence
	// manages the topic, never cleared: an agent cut off keeps the route
	// it has, so the promise is kept by every later cutover.
	FenceAtCutover bool `json:"fenceAtCutover,omitempty"`
	// SourceFenceUp: a cutover put the source fence up (or is about to).
	// Stored before the fence goes up; cleared once a rollback lifted it.
	// It stays up once COMPLETE: a forgotten producer is refused loudly.
	SourceFenceUp bool `json:"sourceFenceUp,omitempty"`
	// CompletedAt is when the topic reached COMPLETE: its source is
	// watched for writes for a while after (docs/design.md §12).
	CompletedAt time.Time `json:"completedAt,omitzero"`
}

// TopicDrain is one topic's forwarding state on an agent, as last reported.
type TopicDrain struct {
	InFlight          uint32 `json:"inFlight"`
	StoppedForwarding bool   `json:"stoppedForwarding"`
	// AckedEnds is, per partition, the offset after the last record the
	// agent acked from the source: the cutover waits for the destination
	// to hold it (an acks=1 write can sit above the high watermark).
	AckedEnds map[int32]int64 `json:"ackedEnds,omitempty"`
}

// Agent is an agent's lease state as stored.
type Agent struct {
	Node          string                `json:"node"`
	Namespace     string                `json:"namespace"`
	Workload      string                `json:"workload"`
	AckedVersion  uint64                `json:"ackedVersion"`
	LastHeartbeat time.Time             `json:"lastHeartbeat"`
	GrantedAt     time.Time             `json:"grantedAt"`
	ExpiresAt     time.Time             `json:"expiresAt"`
	Topics        map[string]TopicDrain `json:"topics,omitempty"`
	Refused       string                `json:"refused,omitempty"`
	// Incarnation is the agent process that last reported (random per
	// process), and EarlierGrantedAt the last grant of an earlier one: a
	// restarted agent's predecessor may have sent produce to the source
	// that lands up to F later, which the new process's drain reports
	// cannot cover (docs/design.md §5, restarts).
	Incarnation      uint64    `json:"incarnation,omitempty"`
	EarlierGrantedAt time.Time `json:"earlierGrantedAt,omitzero"`
	// Replica is the control-plane replica the agent last reported to;
	// it granted the lease, if the agent holds one.
	Replica string `json:"replica,omitempty"`
	// Report is, in a record a follower made, the writes and findings the
	// heartbeat carried (an encoded HeartbeatRequest), for the leader.
	Report []byte `json:"report,omitempty"`
}

// Event is one audit log entry.
type Event struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Topic   string    `json:"topic"`
	Kind    string    `json:"kind"`
	From    string    `json:"from,omitempty"`
	To      string    `json:"to,omitempty"`
	Actor   string    `json:"actor"`
	Reason  string    `json:"reason,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Agent   string    `json:"agent,omitempty"`
	Version uint64    `json:"version,omitempty"`
	// StartedAt is the cutover attempt's start, for cutover events.
	StartedAt time.Time `json:"startedAt,omitzero"`
	// Took, on the cutover event that ends a step (cutover.Steps, and
	// completed), is how long the step took, in nanoseconds on the wire.
	Took time.Duration `json:"tookNanos,omitempty"`
	// Bypass details forgotten_producer and source_written_after_complete.
	Bypass *shadow.BypassInfo `json:"bypass,omitempty"`
	// FenceAtCutover, on a removed event: the topic's routes had promised
	// the source fence (design §6.1). An agent cut off keeps that route, so
	// the topic added again soon after keeps the promise.
	FenceAtCutover bool `json:"fenceAtCutover,omitempty"`
}
