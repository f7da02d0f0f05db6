package replicator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// DefaultGroupSyncInterval is how often Run copies consumer-group offsets.
const DefaultGroupSyncInterval = 5 * time.Second

// GroupSyncInterval sets how often Run copies the committed offsets of the
// groups that read managed topics from S to D, overriding 5 s. 0 disables
// the periodic sync; SyncGroups still works.
func GroupSyncInterval(d time.Duration) Opt {
	return optFunc(func(c *config) { c.groupSyncInterval = d })
}

// GroupOffset is one partition offset of a group copied (or due to be
// copied) from S to D.
type GroupOffset struct {
	Group     string
	Topic     string
	Partition int32
	// Source is the offset the group committed on S.
	Source int64
	// Destination is the offset committed on D: Source translated through
	// the offset map, or D's copied end when Clamped.
	Destination int64
	// Clamped is true when Source is beyond what the replicator has copied:
	// Destination is then D's end of the copied progress, so the group
	// never skips a record D does not hold yet.
	Clamped bool
}

// GroupSyncReport says what one SyncGroups pass did.
type GroupSyncReport struct {
	// Synced lists the offsets committed on D in this pass (offsets that
	// already matched are not committed again and not listed).
	Synced []GroupOffset
	// Unchanged counts offsets D already held.
	Unchanged int
	// AheadOnD lists offsets D holds beyond S's (translated) offset, left
	// as they are: the group made progress on D (its consumers moved
	// there), or it was reset back on S. Sync never moves a group back.
	// Destination is D's committed offset.
	AheadOnD []GroupOffset
	// SkippedActive lists groups left alone because they have active
	// members on D, sorted.
	SkippedActive []string
}

// Clamped returns the synced offsets that were clamped.
func (r GroupSyncReport) Clamped() []GroupOffset {
	var out []GroupOffset
	for _, o := range r.Synced {
		if o.Clamped {
			out = append(out, o)
		}
	}
	return out
}

// idleStates are the group states in which D has no active member.
func idleState(s string) bool {
	switch strings.ToLower(s) {
	case "", "empty", "dead":
		return true
	}
	return false
}

// partProgress is what D holds of one partition, for clamping.
type partProgress struct {
	hold     int64 // destination end of the copied progress
	progress int64 // first source offset not copied
}

// SyncGroups copies the committed offsets of every group that has offsets
// on S for a managed topic to D, for groups with no active members on D
// (missing, Empty or Dead there); groups active on D are skipped and
// reported. Offsets are translated through the partition's offset map when
// parity is mapped, and never go beyond what D holds of the partition: an
// offset past the copied progress is clamped to D's copied end. A group's
// offset on D only moves forward: one D already holds beyond S's is left
// (AheadOnD). Only topics whose destination is set up are synced. A topic
// whose copy stopped (Stop) keeps being synced through its Handoff, since
// its groups may read it on S until they move to D, until Start copies it
// again.
//
// Each request is bounded by the RequestTimeout, the pass by ctx. It needs
// Run to be running (ErrNotRunning otherwise). Per-group failures are
// joined in the error (wrapping ErrGroupSync); the report holds what
// succeeded.
func (r *Replicator) SyncGroups(ctx context.Context) (GroupSyncReport, error) {
	var rep GroupSyncReport
	r.mu.Lock()
	srcAdm, dstAdm := r.srcAdm, r.dstAdm
	var topics []string // copied now
	for name, t := range r.topics {
		if t.ready && !t.stopping {
			topics = append(topics, name)
		}
	}
	handedOff := map[string]bool{} // copy stopped: synced through the handoff
	for name := range r.handoffs {
		if _, copied := r.topics[name]; !copied {
			handedOff[name] = true
		}
	}
	r.mu.Unlock()
	if srcAdm == nil || dstAdm == nil {
		return rep, ErrNotRunning
	}
	if len(topics) == 0 && len(handedOff) == 0 {
		return rep, nil
	}
	sort.Strings(topics)
	managed := map[string]bool{}
	for _, t := range topics {
		managed[t] = true
	}
	for t := range handedOff {
		managed[t] = true
	}

	// Groups on S with committed offsets for managed topics.
	listed, err := srcAdm.ListGroups(ctx)
	if err != nil {
		return rep, fmt.Errorf("%w: listing source groups: %w", ErrGroupSync, err)
	}
	if len(listed) == 0 {
		return rep, nil
	}
	fetched := srcAdm.FetchManyOffsets(ctx, listed.Groups()...)
	var errs []error
	want := map[string]kadm.OffsetResponses{} // group -> managed offsets on S
	for g, f := range fetched {
		if f.Err != nil {
			errs = append(errs, fmt.Errorf("%w: fetching offsets of group %s on the source: %w", ErrGroupSync, g, f.Err))
			continue
		}
		f.Fetched.Each(func(o kadm.OffsetResponse) {
			if !managed[o.Topic] || o.Err != nil || o.At < 0 {
				return
			}
			if want[g] == nil {
				want[g] = kadm.OffsetResponses{}
			}
			if want[g][o.Topic] == nil {
				want[g][o.Topic] = map[int32]kadm.OffsetResponse{}
			}
			want[g][o.Topic][o.Partition] = o
		})
	}
	if len(want) == 0 {
		return rep, errors.Join(errs...)
	}
	groups := make([]string, 0, len(want))
	for g := range want {
		groups = append(groups, g)
	}
	sort.Strings(groups)

	// Which of them are active on D: ListGroups covers every group type,
	// DescribeGroups the members of classic groups.
	active := map[string]bool{}
	dlisted, err := dstAdm.ListGroups(ctx)
	if err != nil {
		return rep, fmt.Errorf("%w: listing destination groups: %w", ErrGroupSync, err)
	}
	var toDescribe []string
	for _, g := range groups {
		if lg, ok := dlisted[g]; ok {
			if !idleState(lg.State) {
				active[g] = true
			} else {
				toDescribe = append(toDescribe, g)
			}
		}
	}
	if len(toDescribe) > 0 {
		described, err := dstAdm.DescribeGroups(ctx, toDescribe...)
		if err != nil {
			return rep, fmt.Errorf("%w: describing destination groups: %w", ErrGroupSync, err)
		}
		for _, g := range toDescribe {
			dg, ok := described[g]
			switch {
			case !ok:
			case dg.Err != nil && !errors.Is(dg.Err, kerr.GroupIDNotFound):
				active[g] = true // cannot tell: leave it alone
				errs = append(errs, fmt.Errorf("%w: describing group %s on the destination: %w", ErrGroupSync, g, dg.Err))
			case len(dg.Members) > 0 || !idleState(dg.State):
				active[g] = true
			}
		}
	}

	// What D holds of each partition being copied.
	var ends kadm.ListedOffsets
	if len(topics) > 0 {
		if ends, err = dstAdm.ListEndOffsets(ctx, topics...); err != nil {
			return rep, fmt.Errorf("%w: listing destination end offsets: %w", ErrGroupSync, err)
		}
	}

	for _, g := range groups {
		if active[g] {
			rep.SkippedActive = append(rep.SkippedActive, g)
			r.metrics.groupSkippedActive.Inc()
			continue
		}
		have, err := dstAdm.FetchOffsets(ctx, g)
		if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			errs = append(errs, fmt.Errorf("%w: fetching offsets of group %s on the destination: %w", ErrGroupSync, g, err))
			continue
		}
		commit := kadm.Offsets{}
		var planned []GroupOffset
		r.mu.Lock()
		want[g].Each(func(o kadm.OffsetResponse) {
			var pp partProgress
			if handedOff[o.Topic] {
				// D grows with the producers' own writes now: what the
				// copy left there is the handoff, not D's end.
				h, ok := r.handoffs[o.Topic][o.Partition]
				if !ok {
					return
				}
				pp = h
			} else {
				if _, ok := r.mayWrite(o.Topic, o.Partition); !ok {
					return // another worker's partition: it syncs it
				}
				end, ok := ends.Lookup(o.Topic, o.Partition)
				if !ok || end.Err != nil {
					return // partition not on D yet
				}
				pp = r.progressLocked(o.Topic, o.Partition, end.Offset)
			}
			dst, clamped := r.translateLocked(o.Topic, o.Partition, o.At, pp)
			if h, ok := have.Lookup(o.Topic, o.Partition); ok && h.Err == nil && h.At >= dst {
				if h.At == dst {
					rep.Unchanged++
				} else {
					rep.AheadOnD = append(rep.AheadOnD, GroupOffset{Group: g, Topic: o.Topic, Partition: o.Partition,
						Source: o.At, Destination: h.At})
				}
				return
			}
			commit.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: dst, LeaderEpoch: -1, Metadata: o.Metadata})
			planned = append(planned, GroupOffset{Group: g, Topic: o.Topic, Partition: o.Partition,
				Source: o.At, Destination: dst, Clamped: clamped})
		})
		r.mu.Unlock()
		if len(planned) == 0 {
			continue
		}
		resp, err := dstAdm.CommitOffsets(ctx, g, commit)
		if err == nil {
			err = resp.Error()
		}
		switch {
		case errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) ||
			errors.Is(err, kerr.RebalanceInProgress):
			// A member joined on D between the check and the commit.
			rep.SkippedActive = append(rep.SkippedActive, g)
			r.metrics.groupSkippedActive.Inc()
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("%w: committing offsets of group %s on the destination: %w", ErrGroupSync, g, err))
			continue
		}
		for _, o := range planned {
			r.metrics.groupSynced.WithLabelValues(o.Topic).Inc()
			if o.Clamped {
				r.metrics.groupClamped.WithLabelValues(o.Topic).Inc()
			}
		}
		rep.Synced = append(rep.Synced, planned...)
	}
	sort.Strings(rep.SkippedActive)
	sortGroupOffsets(rep.Synced)
	sortGroupOffsets(rep.AheadOnD)
	return rep, errors.Join(errs...)
}

func sortGroupOffsets(os []GroupOffset) {
	sort.Slice(os, func(i, j int) bool {
		a, b := os[i], os[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
}

// progressLocked returns what D holds of topic/p: the smaller of D's listed
// end and the replicator's acknowledged end, and the matching source
// progress. r.mu is held.
func (r *Replicator) progressLocked(topic string, p int32, dEnd int64) partProgress {
	m := r.maps[topic]
	if t, ok := r.topics[topic]; ok {
		if ps, ok := t.parts[p]; ok && ps.inited && ps.dstEnd <= dEnd {
			return partProgress{hold: ps.dstEnd, progress: ps.next}
		}
	}
	return partProgress{hold: dEnd, progress: m.ToSource(p, dEnd)}
}

// translateLocked maps source offset src of topic/p to the offset to commit
// on D, clamped to the copied progress. r.mu is held.
func (r *Replicator) translateLocked(topic string, p int32, src int64, pp partProgress) (int64, bool) {
	return translateOffset(r.maps[topic], p, src, pp)
}

// translateOffset is translateLocked's pure arithmetic: a source offset past
// the copied progress becomes the copied destination end (clamped); any
// other goes through the map (the identity for exact parity) and is capped
// at the copied destination end, which a source offset just past a skipped
// tail (a transaction marker) translates beyond.
func translateOffset(m OffsetMap, p int32, src int64, pp partProgress) (int64, bool) {
	if src > pp.progress {
		return pp.hold, true
	}
	return min(m.ToDestination(p, src), pp.hold), false
}

// groupSyncer runs SyncGroups every interval until ctx ends.
func (r *Replicator) groupSyncer(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastSkipped string
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rep, err := r.SyncGroups(ctx)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("group offset sync", "err", err)
		}
		if s := strings.Join(rep.SkippedActive, ","); s != lastSkipped {
			lastSkipped = s
			if s != "" {
				r.log.Info("groups active on the destination are not synced", "groups", rep.SkippedActive)
			}
		}
		for _, o := range rep.Synced {
			r.log.Debug("group offset synced", "group", o.Group, "topic", o.Topic, "partition", o.Partition,
				"source", o.Source, "destination", o.Destination, "clamped", o.Clamped)
		}
	}
}
