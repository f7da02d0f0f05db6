package controlplane

import (
	"context"

	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/controlplane/store"
	"github.com/baton-kafka/baton/xds"
)

// The stored types are package store's (controlplane/store).
type (
	Shadow     = store.Shadow
	TopicSpec  = store.TopicSpec
	Cutover    = store.Cutover
	Topic      = store.Topic
	TopicDrain = store.TopicDrain
	Agent      = store.Agent
	Event      = store.Event

	Store         = store.Store
	EtcdStore     = store.EtcdStore
	MemStore      = store.MemStore
	RouteState    = store.RouteState
	RecordedAgent = store.RecordedAgent
)

// LockFile is store.LockFile.
const LockFile = store.LockFile

// OpenEtcd is store.OpenEtcd.
func OpenEtcd(ctx context.Context, endpoints []string) (*EtcdStore, error) {
	return store.OpenEtcd(ctx, endpoints)
}

// OpenEmbedded is store.OpenEmbedded.
func OpenEmbedded(ctx context.Context, dir string) (*EtcdStore, error) {
	return store.OpenEmbedded(ctx, dir)
}

// NewMemStore is store.NewMemStore.
func NewMemStore() *MemStore { return store.NewMemStore() }

// AgentView is an agent as `baton agents` shows it: its lease and its xDS
// stream.
type AgentView struct {
	Agent
	LeaseValid bool           `json:"leaseValid"`
	XDS        xds.NodeStatus `json:"xds"`
}

// Event kinds of the audit log.
const (
	EventAdded          = "added"
	EventTransition     = "transition"
	EventRemoved        = "removed"
	EventInitiated      = "initiated"
	EventGateRefused    = "gate_refused"
	EventWaitingOnAgent = "waiting_on_agent"
	EventAgentDrained   = "agent_drained"
	EventAgentExpired   = "agent_lease_expired"
	EventDrained        = "drained"
	EventEndOffsets     = "end_offsets"
	EventLagZero        = "lag_zero"
	EventReplStopped    = "replication_stopped"
	EventGuardLifted    = "guard_lifted"
	// EventSourceFenced: every source broker enforces the cutover's fence
	// on the topic (docs/design.md §6.1).
	EventSourceFenced = "source_fenced"
	// EventSourceFenceLifted: a rollback's fence was lifted; producers may
	// write the topic on the source again.
	EventSourceFenceLifted = acl.EventSourceFenceLifted
	// EventGuardRestoreFailed: the first failed attempt at restoring a
	// topic's write guard; restores go on in the background.
	EventGuardRestoreFailed = acl.EventGuardRestoreFailed
	// EventGuardRestored: the write guard is back after a rollback or
	// after failed attempts.
	EventGuardRestored = acl.EventGuardRestored
	EventCompleted     = "completed"
	EventTimedOut      = "timed_out"
	EventFailed        = "failed"
	EventAborted       = "aborted"
	EventRolledBack    = "rolled_back"
	EventRecovered     = "recovered_after_restart"
	// EventFinding: an agent reported a finding that was not open
	// (package shadow); its reason names the kind, the principal or client
	// id and what to do.
	EventFinding = shadow.EventFinding
	// EventShadowChanged: a topic's shadow features were switched.
	EventShadowChanged = "shadow_changed"
	// EventForgottenProducer: records in the source of a PROXY topic no
	// agent reported writing (docs/design.md §12); one per producer id and
	// partition in shadow.DefaultBypassDedupe.
	EventForgottenProducer = shadow.EventForgottenProducer
	// EventSourceWrittenAfterComplete: the source of a COMPLETE topic
	// grew; one per growth episode.
	EventSourceWrittenAfterComplete = shadow.EventSourceWrittenAfterComplete
)
