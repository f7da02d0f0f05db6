// Package replicator owns Baton's source-to-destination copy: it copies the
// raw record batches of each managed topic partition from S.T.p to D.T.p
// with offset parity, measures time lag, and orders the work by priority.
//
// What it guarantees, and how:
//
//   - Batches are copied byte for byte (boundaries, compression, timestamps,
//     headers). Only the producer id, epoch and base sequence are rewritten,
//     to the replicator's own idempotent producer on D, and the
//     transactional bit is cleared; the CRC-32C is recomputed. A batch whose
//     records do not fill its offset range (compaction removed some) is
//     re-encoded with contiguous offset deltas, same codec and records.
//   - A batch D refuses (too large, not authorized) stops its partition with
//     ErrDestinationRejected in Status; the partition is retried with
//     backoff and nothing after the batch is copied until D accepts it.
//   - Produce to D uses acks=all and one batch in flight per partition, with
//     per-partition sequences, so D holds each batch once and in order even
//     when a produce is retried.
//   - Fetches from S are read_committed: nothing past the last stable offset
//     is copied, so the replicator never copies data whose transaction may
//     still abort, and never has to take anything back. Committed
//     transactional batches are written as plain idempotent batches; aborted
//     batches and transaction markers (which a client cannot produce) are
//     skipped.
//   - Offset parity (invariant 3, docs/design.md §4): where S.T.p starts at 0 and is
//     contiguous, D.T.p at o holds S.T.p's record at o. Where S has gaps
//     (markers, aborted data, a log start above 0, records deleted before
//     they were copied, records removed by compaction, also inside a batch),
//     the offsets shift and an exact offset map is persisted on D
//     (OffsetMapTopic), written and acknowledged before the batch it
//     describes; segments beyond D's end are withdrawn on resume. Status reports exact or mapped parity per
//     partition.
//   - D is the checkpoint: a (re)started replicator resumes each partition
//     at D's end offset translated through the offset map. Run returns
//     only after every produce in flight was answered, so a restart in the
//     same process neither duplicates nor skips.
//   - Time lag per partition is measured from the replicator's own samples
//     of S's last stable offsets: now minus the time of the first sample
//     that showed the next offset to copy, 0 when caught up.
//   - Consumer-group offsets: SyncGroups (and Run, every GroupSyncInterval)
//     copies the committed offsets of the groups reading managed topics from
//     S to D, translated through the offset map, for groups with no active
//     members on D; an offset beyond the copied progress is clamped to D's
//     copied end, so a group on D never skips a record D does not hold.
//   - Topic configs: D.T is created with S.T's dynamic configs, and Run
//     mirrors later changes (set and removed keys) every ConfigSyncInterval,
//     except the configs the replicator controls (controlledConfigs).
//   - Schedule orders the work: migrating topics, then shortest job first
//     across topics, then most lag first within a topic. Besides the
//     Workers, each partition of a migrating topic is copied on a lane of
//     its own, so a cutover's catch-up waits for no other copy step; and
//     copy steps produce to D over several connections per broker (a
//     broker answers one request of a connection at a time).
//
// The package also holds Verify, the record-by-record parity check behind
// `baton verify parity`.
package replicator
