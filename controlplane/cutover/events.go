package cutover

import "time"

// Event is what happened: an outcome of an Action, or an operator's Abort.
type Event interface{ event() }

// Result is the outcome of an Action that can fail.
type Result struct {
	Err error
	// Expired says the Action's context ended at the attempt's deadline:
	// the failure is a timeout whatever the clock says.
	Expired bool
}

// Start begins the attempt (MIGRATING is stored and pushed).
type Start struct{}

// LeasesRead answers ReadLeases.
type LeasesRead struct{ Result }

// AgentsRead answers ReadAgents: every agent the control plane knows.
type AgentsRead struct{ Agents []Agent }

// StepStored answers StoreStep.
type StepStored struct{ Result }

// FencePut answers PutFence.
type FencePut struct{ Result }

// FenceChecked answers CheckFence: Enforced when every source broker
// enforces the fence, else Behind says which does not.
type FenceChecked struct {
	Enforced bool
	Behind   string
	Result
}

// Slept answers Sleep.
type Slept struct{}

// PriorityRaised answers RaisePriority.
type PriorityRaised struct{ Result }

// EndOffsetsRead answers ReadEndOffsets: the source's end offsets, and
// per partition the highest end an agent acked above them.
type EndOffsetsRead struct {
	Ends       map[int32]int64
	AckedAbove map[int32]AckedEnd
	Result
}

// AckedEnd is an end offset an agent acked, above the source's high
// watermark when read.
type AckedEnd struct {
	End  int64
	Node string
}

// ProgressRead answers ReadProgress: the next offset the destination
// needs per partition, and what diverged (non-empty: the copy broke
// offset parity, and says where).
type ProgressRead struct {
	Progress map[int32]int64
	Diverged string
	Result
}

// ReplicationStopped answers StopReplication: where it stopped, and what
// diverged.
type ReplicationStopped struct {
	Final    map[int32]int64
	Diverged string
	Result
}

// GuardLifted answers LiftGuard.
type GuardLifted struct{ Result }

// CompleteStored answers StoreComplete.
type CompleteStored struct{ Result }

// Abort is an operator's abort (Actor, Reason): the attempt rolls back
// unless it is decided.
type Abort struct{ Actor, Reason string }

func (Start) event()              {}
func (LeasesRead) event()         {}
func (AgentsRead) event()         {}
func (StepStored) event()         {}
func (FencePut) event()           {}
func (FenceChecked) event()       {}
func (Slept) event()              {}
func (PriorityRaised) event()     {}
func (EndOffsetsRead) event()     {}
func (ProgressRead) event()       {}
func (ReplicationStopped) event() {}
func (GuardLifted) event()        {}
func (CompleteStored) event()     {}
func (Abort) event()              {}

// Action is what to do next. Each but Emit and RollBack is answered by
// the Event its doc names.
type Action interface{ action() }

// Emit records a cutover event (Kind, the Agent it is about, Reason).
// Took, on the event that ends a step (Steps lists their kinds), is how
// long that step took: since the previous step's event, or since Start
// for the first.
type Emit struct {
	Kind, Agent, Reason string
	Took                time.Duration
}

// ReadLeases reads the leases other replicas granted (answer: LeasesRead).
type ReadLeases struct{}

// ReadAgents reads every agent's drain report and lease (answer:
// AgentsRead); with Wait, first wait until an agent reports or a poll
// interval passes.
type ReadAgents struct{ Wait bool }

// StoreStep stores the attempt's step (answer: StepStored); with
// SourceFenceUp, the topic's fence recorded up too; at StepDone, with the
// source batches the replication stop returned.
type StoreStep struct {
	Step          Step
	SourceFenceUp bool
}

// PutFence puts the topic's source fence up (answer: FencePut).
type PutFence struct{}

// CheckFence asks whether every source broker enforces the fence (answer:
// FenceChecked); with Wait, after an agent reports or a poll interval
// passes.
type CheckFence struct{ Wait bool }

// Sleep waits For (answer: Slept).
type Sleep struct{ For time.Duration }

// RaisePriority puts the topic's replication at top priority (answer:
// PriorityRaised).
type RaisePriority struct{}

// ReadEndOffsets reads the source's end offsets and the ends agents acked
// above them (answer: EndOffsetsRead).
type ReadEndOffsets struct{}

// ReadProgress reads replication's progress (answer: ProgressRead); with
// Wait, after an agent reports or a poll interval passes.
type ReadProgress struct{ Wait bool }

// StopReplication stops the topic's replication (answer:
// ReplicationStopped).
type StopReplication struct{}

// LiftGuard lifts the destination write guard (answer: GuardLifted).
type LiftGuard struct{}

// StoreComplete stores COMPLETE, conditional on the attempt being
// undecided in the store (answer: CompleteStored; or Abort when the
// operator aborted before it was stored). Stored, the attempt is decided.
type StoreComplete struct{}

// RollBack decides the attempt: Kind (KindTimedOut, KindFailed,
// KindAborted) says why, by Actor ("" for the control plane), with
// Reason. The driver stores PROXY conditional on the attempt being
// undecided (a COMPLETE reported failed but stored stands), restarts
// replication and restores the write guard; at StepDone it first stores
// StepRollingBack (RollBackMarks).
type RollBack struct{ Kind, Actor, Reason string }

func (Emit) action()            {}
func (ReadLeases) action()      {}
func (ReadAgents) action()      {}
func (StoreStep) action()       {}
func (PutFence) action()        {}
func (CheckFence) action()      {}
func (Sleep) action()           {}
func (RaisePriority) action()   {}
func (ReadEndOffsets) action()  {}
func (ReadProgress) action()    {}
func (StopReplication) action() {}
func (LiftGuard) action()       {}
func (StoreComplete) action()   {}
func (RollBack) action()        {}
