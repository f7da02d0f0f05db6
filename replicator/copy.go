package replicator

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/recordbatch"
)

func itoa(p int32) string { return strconv.Itoa(int(p)) }

// setupTopic makes D.T exist with S.T's partition count (creating it with
// S.T's dynamic topic configs, less controlledConfigs) and adds partition
// states.
func (r *Replicator) setupTopic(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.requestTimeout)
	defer cancel()
	sd, err := r.srcAdm.ListTopics(ctx, name)
	if err != nil {
		return fmt.Errorf("source metadata for %s: %w", name, err)
	}
	st := sd[name]
	if errors.Is(st.Err, kerr.UnknownTopicOrPartition) || (st.Err == nil && len(st.Partitions) == 0) {
		return fmt.Errorf("%w: %s", ErrSourceTopicMissing, name)
	} else if st.Err != nil {
		return fmt.Errorf("source metadata for %s: %w", name, st.Err)
	}
	n := len(st.Partitions)
	dd, err := r.dstAdm.ListTopics(ctx, name)
	if err != nil {
		return fmt.Errorf("destination metadata for %s: %w", name, err)
	}
	dt := dd[name]
	dMissing := errors.Is(dt.Err, kerr.UnknownTopicOrPartition) || (dt.Err == nil && len(dt.Partitions) == 0)
	sid, err := r.sourceTopicID(ctx, name)
	if err != nil {
		return err
	}
	record, err := r.checkSourceID(name, sid, dMissing)
	if err != nil {
		return err
	}
	if record && !dMissing {
		// A D.T copied before ids were recorded: from now on it is tied
		// to this S topic.
		if err := r.recordSourceID(ctx, name, sid, false); err != nil {
			return err
		}
	}
	switch {
	case dMissing:
		cfgs := map[string]*string{}
		rcs, err := r.srcAdm.DescribeTopicConfigs(ctx, name)
		if err != nil {
			return fmt.Errorf("source configs of %s: %w", name, err)
		}
		for _, rc := range rcs {
			for _, c := range rc.Configs {
				if c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil && mirrored(c.Key) {
					cfgs[c.Key] = c.Value
				}
			}
		}
		resp, err := r.dstAdm.CreateTopic(ctx, int32(n), -1, cfgs, name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			// D's metadata lagged: D.T exists after all. Set up again,
			// checking the source id against it.
			return fmt.Errorf("creating %s on the destination: %w (set up again)", name, err)
		case err != nil:
			return fmt.Errorf("creating %s on the destination: %w", name, err)
		}
		r.log.Info("created topic on the destination", "topic", name, "partitions", n, "configs", len(cfgs))
		if record {
			// D.T is new: what the map said of an older D.T goes.
			if err := r.recordSourceID(ctx, name, sid, true); err != nil {
				return err
			}
		}
	case dt.Err != nil:
		return fmt.Errorf("destination metadata for %s: %w", name, dt.Err)
	case len(dt.Partitions) < n:
		resp, err := r.dstAdm.UpdatePartitions(ctx, n, name)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("adding partitions to %s on the destination: %w", name, err)
		}
		r.log.Info("added partitions on the destination", "topic", name, "partitions", n)
	case len(dt.Partitions) > n:
		return fmt.Errorf("%w: %s has %d partitions on the destination, %d on the source", ErrDestinationDiverged, name, len(dt.Partitions), n)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.topics[name]
	if !ok {
		return nil
	}
	for i := range int32(n) {
		if _, ok := t.parts[i]; !ok {
			t.parts[i] = &partState{topic: name, p: i, srcLeader: -1, dstLeader: -1, next: -1, recent: recentBatches{}, resync: true}
		}
	}
	t.ready = true
	return nil
}

// sourceTopicID asks a source broker for topic's id directly: the client's
// own metadata (what kadm answers from) may be up to MetadataMinAge old and
// still show the id of a topic just deleted and created again.
func (r *Replicator) sourceTopicID(ctx context.Context, name string) (kadm.TopicID, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(name)
	req.Topics = append(req.Topics, rt)
	var resp *kmsg.MetadataResponse
	var err error
	if bs := r.src.DiscoveredBrokers(); len(bs) > 0 {
		resp, err = req.RequestWith(ctx, bs[rand.IntN(len(bs))])
	} else {
		resp, err = req.RequestWith(ctx, r.src)
	}
	if err != nil {
		return kadm.TopicID{}, fmt.Errorf("source topic id of %s: %w", name, err)
	}
	for _, t := range resp.Topics {
		if t.Topic != nil && *t.Topic == name {
			if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
				if errors.Is(err, kerr.UnknownTopicOrPartition) {
					return kadm.TopicID{}, fmt.Errorf("%w: %s", ErrSourceTopicMissing, name)
				}
				return kadm.TopicID{}, fmt.Errorf("source topic id of %s: %w", name, err)
			}
			return kadm.TopicID(t.TopicID), nil
		}
	}
	return kadm.TopicID{}, fmt.Errorf("%w: %s", ErrSourceTopicMissing, name)
}

// checkSourceID makes sure D.T was copied from the S topic that now has the
// name: a topic deleted and re-created on S has a new id, and copying it
// onto D.T would splice two topics at the same offsets. record says the id
// must be recorded on D: before copying into a D.T copied before ids were
// recorded, or once a missing D.T was created (not before: D's metadata may
// lag, and a D.T that exists after all must still be checked).
func (r *Replicator) checkSourceID(name string, id kadm.TopicID, dMissing bool) (record bool, err error) {
	if id == (kadm.TopicID{}) {
		return false, nil // a cluster without topic ids: nothing to compare
	}
	r.mu.Lock()
	rec, known := r.sourceIDs[name]
	r.mu.Unlock()
	switch {
	case known && rec == id:
		return false, nil
	case known && !dMissing:
		return false, fmt.Errorf("%w: %s has topic id %x on the source, the destination's copy was made from %x; "+
			"the destination topic is left alone: delete it there to copy the new topic", ErrSourceTopicRecreated, name, id[:], rec[:])
	}
	return true, nil
}

// recordSourceID records on D that D.T is copied from S topic id, before
// anything is copied into it. For a D.T just created, offset map segments
// and a handoff left from an older D.T are withdrawn first.
func (r *Replicator) recordSourceID(ctx context.Context, name string, id kadm.TopicID, fresh bool) error {
	var recs []*kgo.Record
	if fresh {
		r.mu.Lock()
		for _, segs := range r.maps[name] {
			for _, sg := range segs {
				recs = append(recs, &kgo.Record{Topic: r.cfg.mapTopic, Partition: 0, Key: sg.key()})
			}
		}
		if _, ok := r.handoffs[name]; ok {
			recs = append(recs, &kgo.Record{Topic: r.cfg.mapTopic, Partition: 0, Key: handoffKey(name)})
		}
		r.mu.Unlock()
	}
	v, _ := json.Marshal(sourceID{Topic: name, ID: hex.EncodeToString(id[:])})
	recs = append(recs, &kgo.Record{Topic: r.cfg.mapTopic, Partition: 0, Key: sourceIDKey(name), Value: v})
	if err := r.writeMap(ctx, recs); err != nil {
		return fmt.Errorf("recording the source topic id of %s on the destination: %w", name, err)
	}
	r.mu.Lock()
	if fresh {
		delete(r.maps, name)
		delete(r.handoffs, name)
	}
	if r.sourceIDs == nil {
		r.sourceIDs = map[string][16]byte{}
	}
	r.sourceIDs[name] = id
	r.mu.Unlock()
	if fresh && len(recs) > 1 {
		r.log.Info("withdrew the offset map of an earlier destination topic", "topic", name, "records", len(recs)-1)
	}
	return nil
}

// initPartition finds where to resume: D's end offset, translated through
// the offset map, is the next source offset. An empty D starts at S's log
// start.
func (r *Replicator) initPartition(ctx context.Context, p *partState) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.requestTimeout)
	defer cancel()
	ends, err := r.dstAdm.ListEndOffsets(ctx, p.topic)
	if err != nil {
		return fmt.Errorf("destination end offset: %w", err)
	}
	end, ok := ends.Lookup(p.topic, p.p)
	if !ok {
		return fmt.Errorf("destination end offset: partition missing")
	} else if end.Err != nil {
		return fmt.Errorf("destination end offset: %w", end.Err)
	}
	if err := r.resyncMap(ctx, p); err != nil {
		return err
	}
	if err := r.dropStaleSegments(ctx, p, end.Offset); err != nil {
		return err
	}
	// Other partitions' workers add to the same map: read it under r.mu.
	r.mu.Lock()
	m := r.maps[p.topic]
	delta := m.delta(p.p, end.Offset)
	noSegments := len(m[p.p]) == 0
	r.mu.Unlock()
	next := end.Offset + delta
	if end.Offset == 0 && noSegments {
		starts, err := r.srcAdm.ListStartOffsets(ctx, p.topic)
		if err != nil {
			return fmt.Errorf("source start offset: %w", err)
		}
		s, ok := starts.Lookup(p.topic, p.p)
		if !ok || s.Err != nil {
			return fmt.Errorf("source start offset: %v", s.Err)
		}
		next = s.Offset
	}
	prod, err := r.producerFor(ctx, p)
	if err != nil {
		return err
	}
	if err := r.seedRecent(ctx, p, next); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p.next, p.dstEnd, p.delta, p.prod, p.seq, p.inited = next, end.Offset, delta, prod, 0, true
	r.metrics.mapped.WithLabelValues(p.topic, itoa(p.p)).Set(boolGauge(!m.Exact(p.p)))
	r.log.Debug("partition resumes", "topic", p.topic, "partition", p.p, "source_next", next, "destination_end", end.Offset)
	return nil
}

// resyncMap reads p's offset map segments from D again when p needs it
// (resync): under Leases, other workers may have written them since this
// one read the map.
func (r *Replicator) resyncMap(ctx context.Context, p *partState) error {
	r.mu.Lock()
	need := r.cfg.leases != nil && p.resync
	r.mu.Unlock()
	if !need {
		return nil
	}
	loaded, err := loadMapTopic(ctx, r.cfg.destination, r.cfg.mapTopic, r.cfg.dstOpts...)
	if err != nil {
		return fmt.Errorf("%s/%d: reading the offset map again after the lease was another's: %w", p.topic, p.p, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maps == nil {
		r.maps = map[string]OffsetMap{}
	}
	if r.maps[p.topic] == nil {
		r.maps[p.topic] = OffsetMap{}
	}
	if segs := loaded.maps[p.topic][p.p]; len(segs) > 0 {
		r.maps[p.topic][p.p] = segs
	} else {
		delete(r.maps[p.topic], p.p)
	}
	// The recent batches too are read back from the source (seedRecent):
	// the other worker copied some since.
	p.resync, p.seeded, p.recent = false, false, recentBatches{}
	return nil
}

// dropStaleSegments withdraws p's segments beyond D's end offset dEnd: they
// were written for a batch that never reached D (the process stopped, or D
// refused it, between the segment and the batch). The source may have
// changed since (compaction), so they cannot be trusted to describe the
// batch copied there next; a tombstone on D removes each, acks=all, before
// anything is copied. A segment at dEnd itself stays: its source offset is
// where the copy resumes, and nothing before it is left to copy.
func (r *Replicator) dropStaleSegments(ctx context.Context, p *partState, dEnd int64) error {
	r.mu.Lock()
	var stale []Segment
	for _, s := range r.maps[p.topic][p.p] {
		if s.Dst > dEnd {
			stale = append(stale, s)
		}
	}
	r.mu.Unlock()
	if len(stale) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(stale))
	for i, s := range stale {
		recs[i] = &kgo.Record{Topic: r.cfg.mapTopic, Partition: 0, Key: s.key()}
	}
	if err := r.writeMap(ctx, recs); err != nil {
		return fmt.Errorf("%s/%d: withdrawing offset map segments beyond the destination end %d: %w", p.topic, p.p, dEnd, err)
	}
	r.mu.Lock()
	for _, s := range stale {
		r.maps[p.topic].remove(p.p, s.Dst)
	}
	r.mu.Unlock()
	r.log.Info("withdrew offset map segments of a batch that never reached the destination",
		"topic", p.topic, "partition", p.p, "destination_end", dEnd, "segments", len(stale))
	return nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// producerFor returns the producer id p writes with: the run's shared id
// on p's first init, a fresh one after p failed (its sequence restarts at
// 0, which a used id would reject).
func (r *Replicator) producerFor(ctx context.Context, p *partState) (producerID, error) {
	r.mu.Lock()
	shared, used := r.pid, p.usedPID
	r.mu.Unlock()
	if shared.id != 0 && !used {
		r.mu.Lock()
		p.usedPID = true
		r.mu.Unlock()
		return shared, nil
	}
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionTimeoutMillis = 60000
	req.ProducerID, req.ProducerEpoch = -1, -1
	resp, err := req.RequestWith(ctx, r.dst)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil && isKafkaErr(err) && !kerr.IsRetriable(err) {
		return producerID{}, fmt.Errorf("%w: %s/%d: InitProducerId: %w", ErrDestinationRejected, p.topic, p.p, err)
	} else if err != nil {
		return producerID{}, fmt.Errorf("InitProducerId on the destination: %w", err)
	}
	got := producerID{id: resp.ProducerID, epoch: resp.ProducerEpoch}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pid.id == 0 && !p.usedPID {
		r.pid = got
		p.usedPID = true
	}
	return got, nil
}

// leader returns the leader of topic/partition on cl.
func leader(ctx context.Context, cl *kgo.Client, topic string, partition int32) (int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return -1, err
		}
		for _, p := range t.Partitions {
			if p.Partition == partition {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return -1, err
				}
				if p.Leader < 0 {
					return -1, kerr.LeaderNotAvailable
				}
				return p.Leader, nil
			}
		}
	}
	return -1, kerr.UnknownTopicOrPartition
}

// step copies what one fetch from S at p.next returns. p is busy: only this
// goroutine writes its copy fields; r.mu guards them for readers.
func (r *Replicator) step(ctx context.Context, p *partState) (err error) {
	from := p.next
	if !p.inited {
		if err := r.initPartition(ctx, p); err != nil {
			return err
		}
	}
	defer func() {
		if f := r.onProgress.Load(); f != nil && p.next != from {
			(*f)(p.topic)
		}
	}()
	defer func() {
		if err != nil {
			// Anything uncertain is settled by resuming from what D holds.
			r.mu.Lock()
			p.inited = false
			r.mu.Unlock()
		}
	}()
	fctx, cancel := context.WithTimeout(ctx, r.cfg.requestTimeout)
	defer cancel()
	fp, err := r.fetch(fctx, p, p.next)
	if errors.Is(err, kerr.OffsetOutOfRange) {
		return r.outOfRange(fctx, p, fp)
	} else if err != nil {
		return err
	}
	r.mu.Lock()
	p.lag.observe(r.now(), fp.LastStableOffset)
	r.mu.Unlock()

	batches, splitErr := splitBatches(fp.RecordBatches)
	txns := make([]abortedTxn, 0, len(fp.AbortedTransactions))
	for _, a := range fp.AbortedTransactions {
		txns = append(txns, abortedTxn{producerID: a.ProducerID, firstOffset: a.FirstOffset})
	}
	filter := newAbortedFilter(txns)
	for _, b := range batches {
		if b.lastOffset() < p.next {
			continue // before the fetch offset: already copied
		}
		if b.baseOffset >= fp.LastStableOffset && fp.LastStableOffset >= 0 {
			break // not yet decided (kfake may return past the LSO)
		}
		if filter.skip(b) {
			reason := "aborted"
			if b.control() {
				reason = "control"
			}
			r.skip(p, b, reason)
			continue
		}
		if b.numRecords == 0 {
			r.skip(p, b, "empty") // compaction keeps a batch's producer state
			continue
		}
		if f := r.onRead.Load(); f != nil {
			r.mu.Lock()
			after, seen := p.lag.before(b.baseOffset), p.lag.seen(b.baseOffset)
			r.mu.Unlock()
			at := r.now()
			if seen.IsZero() || seen.After(at) {
				seen = at
			}
			(*f)(SourceRead{Topic: p.topic, Partition: p.p, BaseOffset: b.baseOffset, End: b.lastOffset() + 1,
				ProducerID: b.producerID, After: after, Seen: seen, At: at})
		}
		raw, runs := b.raw, []srcRun{{src: b.baseOffset, n: b.numRecords}}
		if !b.contiguous() || b.baseOffset < p.next {
			// Compaction removed records inside the batch, or the copy
			// resumes inside it (D ends at a record followed by a hole).
			var err error
			if raw, runs, err = reencodeBatch(b.raw, p.next); err != nil {
				return err
			}
			if len(runs) == 0 {
				r.skip(p, b, "empty")
				continue
			}
			r.metrics.reencoded.WithLabelValues(p.topic).Inc()
		}
		if err := r.copyBatch(ctx, p, b, raw, runs); err != nil {
			return err
		}
	}
	return splitErr
}

// fetch reads p from offset on S's leader (read_committed: see doc.go).
// The partition's error comes back as a Kafka error, with fp.
func (r *Replicator) fetch(ctx context.Context, p *partState, offset int64) (fp kmsg.FetchResponseTopicPartition, err error) {
	if p.srcLeader < 0 {
		if p.srcLeader, err = leader(ctx, r.src, p.topic, p.p); err != nil {
			return fp, fmt.Errorf("source leader: %w", err)
		}
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 100
	req.MinBytes = 1
	req.MaxBytes = r.cfg.fetchMaxBytes
	req.IsolationLevel = 1
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = p.topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = p.p
	rp.FetchOffset = offset
	rp.PartitionMaxBytes = r.cfg.fetchMaxBytes
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := r.src.Broker(int(p.srcLeader)).Request(ctx, req)
	if err != nil {
		p.srcLeader = -1
		return fp, fmt.Errorf("fetch: %w", err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fp, fmt.Errorf("fetch: %w", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fp, fmt.Errorf("fetch: response without the partition")
	}
	fp = resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(fp.ErrorCode); err != nil {
		if !errors.Is(err, kerr.OffsetOutOfRange) {
			p.srcLeader = -1
		}
		return fp, fmt.Errorf("fetch: %w", err)
	}
	return fp, nil
}

// outOfRange handles OFFSET_OUT_OF_RANGE from S: records deleted before
// they were copied are a gap recorded in the offset map and reported; a
// next offset beyond S's end means D holds more than S.
func (r *Replicator) outOfRange(ctx context.Context, p *partState, fp kmsg.FetchResponseTopicPartition) error {
	starts, err := r.srcAdm.ListStartOffsets(ctx, p.topic)
	if err != nil {
		return fmt.Errorf("fetch: offset %d out of range; source start offset: %w", p.next, err)
	}
	s, ok := starts.Lookup(p.topic, p.p)
	if !ok || s.Err != nil {
		return fmt.Errorf("fetch: offset %d out of range; source start offset unknown", p.next)
	}
	if p.next < s.Offset {
		r.mu.Lock()
		lost := s.Offset - p.next
		p.lost += lost
		p.next = s.Offset
		r.mu.Unlock()
		r.metrics.lost.WithLabelValues(p.topic).Add(float64(lost))
		r.log.Error("source records deleted before they were copied", "topic", p.topic, "partition", p.p, "records", lost)
		return nil // p.err carries nothing: the loss stays in Status via lost
	}
	return fmt.Errorf("%w: %s/%d: next source offset %d is beyond the source end %d", ErrDestinationDiverged, p.topic, p.p, p.next, fp.HighWatermark)
}

// skip moves p past a batch that has nothing to copy.
func (r *Replicator) skip(p *partState, b batch, reason string) {
	r.metrics.skipped.WithLabelValues(p.topic, reason).Inc()
	r.mu.Lock()
	p.next = b.lastOffset() + 1
	r.mu.Unlock()
}

// copyBatch writes one source batch b, as raw (b.raw or its re-encoding)
// whose records hold the source offsets runs, to D at the destination end.
// Where a run's offset delta differs from the one in force, an offset map
// segment is recorded first, all of the batch's segments acknowledged by
// D before the batch is sent.
func (r *Replicator) copyBatch(ctx context.Context, p *partState, b batch, raw []byte, runs []srcRun) error {
	segs, delta, n := segmentsFor(p.topic, p.p, p.dstEnd, p.delta, runs)
	if len(segs) > 0 {
		// The segments need the lease as the batch does (produce checks
		// it for the batch).
		until, ok := r.mayWritePart(p)
		if !ok {
			return fmt.Errorf("%w: %s/%d: batch at source offset %d not copied", ErrLeaseLost, p.topic, p.p, b.baseOffset)
		}
		recs := make([]*kgo.Record, len(segs))
		for i, s := range segs {
			v, _ := json.Marshal(s)
			recs[i] = &kgo.Record{Topic: r.cfg.mapTopic, Partition: 0, Key: s.key(), Value: v}
		}
		mctx := ctx
		if !until.IsZero() {
			// Not retried past the lease: another worker writes the
			// partition's segments after it.
			var cancel context.CancelFunc
			mctx, cancel = context.WithDeadline(ctx, until)
			defer cancel()
		}
		if err := r.writeMap(mctx, recs); err != nil {
			return fmt.Errorf("%s/%d: writing offset map segments: %w", p.topic, p.p, err)
		}
		r.mu.Lock()
		m := r.maps[p.topic]
		if m == nil {
			m = OffsetMap{}
			r.maps[p.topic] = m
		}
		for _, s := range segs {
			m.add(s)
		}
		p.delta = delta
		r.mu.Unlock()
		r.metrics.mapped.WithLabelValues(p.topic, itoa(p.p)).Set(1)
		r.log.Debug("offset map segments", "topic", p.topic, "partition", p.p, "segments", len(segs),
			"first_destination", segs[0].Dst, "first_source", segs[0].Src)
	}
	out := rewriteBatch(raw, p.prod.id, p.prod.epoch, p.seq)
	start := time.Now()
	base, err := r.produce(ctx, p, out, b.baseOffset)
	if err != nil {
		return err
	}
	r.metrics.produceLatency.WithLabelValues(p.topic).Observe(time.Since(start).Seconds())
	if base != p.dstEnd {
		return fmt.Errorf("%w: %s/%d: batch landed at %d, expected the destination end %d (another writer?)", ErrDestinationDiverged, p.topic, p.p, base, p.dstEnd)
	}
	r.mu.Lock()
	if b.baseOffset >= p.next { // not a batch the copy entered partway: base is its first record's
		p.recent.note(p.p, b, base, r.now(), r.cfg.recentWindow)
	}
	p.dstEnd += n
	p.next = b.lastOffset() + 1
	p.seq = recordbatch.NextSeq(p.seq, int32(n))
	r.mu.Unlock()
	r.metrics.records.WithLabelValues(p.topic).Add(float64(n))
	r.metrics.bytes.WithLabelValues(p.topic).Add(float64(len(raw)))
	r.metrics.batches.WithLabelValues(p.topic).Inc()
	return nil
}

// segmentsFor returns the offset map segments that describe a batch whose
// records hold the source offsets runs when it is written at destination
// offset dstEnd with delta (source - destination) in force: one wherever
// the delta changes. It also returns the delta in force after the batch and
// the batch's record count.
func segmentsFor(topic string, p int32, dstEnd, delta int64, runs []srcRun) ([]Segment, int64, int64) {
	var segs []Segment
	n := int64(0)
	for _, run := range runs {
		if d := run.src - (dstEnd + n); d != delta {
			segs = append(segs, Segment{Topic: topic, Partition: p, Dst: dstEnd + n, Src: run.src})
			delta = d
		}
		n += int64(run.n)
	}
	return segs, delta, n
}

// writeMap writes offset map records (segments, or tombstones withdrawing
// them) to D in order, acknowledged by all replicas.
func (r *Replicator) writeMap(ctx context.Context, recs []*kgo.Record) error {
	// Not abandoned when ctx is cancelled (a shutdown), but not retried
	// past its deadline either (a worker's lease: copyBatch).
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.requestTimeout)
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		var cancelD context.CancelFunc
		wctx, cancelD = context.WithDeadline(wctx, d)
		defer cancelD()
	}
	err := r.dst.ProduceSync(wctx, recs...).FirstErr()
	if err != nil && isKafkaErr(err) && !kerr.IsRetriable(err) {
		return fmt.Errorf("%w: offset map topic %s: %w", ErrDestinationRejected, r.cfg.mapTopic, err)
	}
	return err
}

// produce writes one rewritten batch to D.T.p with acks=all and returns
// the offset D gave it. Retries keep the producer id and sequence, so D
// drops a duplicate of an attempt that was written but not answered. It
// never abandons a request on the wire: ctx ending stops further retries
// only.
func (r *Replicator) produce(ctx context.Context, p *partState, raw []byte, srcBase int64) (int64, error) {
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = int32(r.cfg.requestTimeout / time.Millisecond)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = p.topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = p.p
	rp.Records = raw
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)

	pctx := context.WithoutCancel(ctx)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// Every attempt, retries too, needs the partition's lease: after
		// it another worker resumes from D's end, and a retry landing then
		// would be written twice.
		until, ok := r.mayWritePart(p)
		if !ok {
			return 0, fmt.Errorf("%w: %s/%d: batch at source offset %d not sent", ErrLeaseLost, p.topic, p.p, srcBase)
		}
		actx, cancel := pctx, context.CancelFunc(func() {})
		if !until.IsZero() {
			actx, cancel = context.WithDeadline(pctx, until)
		}
		base, err := r.produceOnce(actx, p, req)
		cancel()
		if err == nil {
			return base, nil
		}
		retriable := kerr.IsRetriable(err) || !isKafkaErr(err)
		if !retriable {
			// D refuses the batch (too large, not authorized...): the
			// partition stops here and the worker retries it with backoff
			// until an operator fixes D; nothing after it is copied.
			return 0, fmt.Errorf("%w: %s/%d: batch at source offset %d (%d bytes): %w", ErrDestinationRejected, p.topic, p.p, srcBase, len(raw), err)
		}
		if ctx.Err() != nil || attempt >= 10 {
			return 0, fmt.Errorf("produce to %s/%d: %w", p.topic, p.p, err)
		}
		r.noteRetry(p, fmt.Errorf("produce to %s/%d: attempt %d failed, retrying: %w", p.topic, p.p, attempt, err))
		p.dstLeader = -1
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("produce to %s/%d: %w", p.topic, p.p, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, r.cfg.maxBackoff)
	}
}

// noteRetry puts an attempt that failed and is being retried into p's
// status at once: with D away one attempt can take two request timeouts
// (dialing, metadata), and an operator must not see a healthy partition
// meanwhile. The worker settles the status when the step ends.
func (r *Replicator) noteRetry(p *partState, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.err == nil {
		r.log.Warn("copy step retrying", "topic", p.topic, "partition", p.p, "err", err)
	}
	r.setPartitionErrLocked(p, err)
}

// setPartitionErrLocked sets p's error and keeps the partition error gauge
// on exactly its kind (none for nil). r.mu is held.
func (r *Replicator) setPartitionErrLocked(p *partState, err error) {
	if p.err != nil && (err == nil || errKind(p.err) != errKind(err)) {
		r.metrics.partitionError.DeleteLabelValues(p.topic, itoa(p.p), errKind(p.err))
	}
	if err != nil {
		r.metrics.partitionError.WithLabelValues(p.topic, itoa(p.p), errKind(err)).Set(1)
	}
	if errors.Is(err, ErrDestinationDiverged) && r.diverged[p.topic][p.p] == nil {
		if r.diverged == nil {
			r.diverged = map[string]map[int32]error{}
		}
		if r.diverged[p.topic] == nil {
			r.diverged[p.topic] = map[int32]error{}
		}
		r.diverged[p.topic][p.p] = err
	}
	p.err = err
}

// produceOnce sends req to p's destination leader and waits for the answer.
func (r *Replicator) produceOnce(ctx context.Context, p *partState, req *kmsg.ProduceRequest) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*r.cfg.requestTimeout)
	defer cancel()
	if p.dstLeader < 0 {
		l, err := leader(ctx, r.dst, p.topic, p.p)
		if err != nil {
			return 0, fmt.Errorf("destination leader: %w", err)
		}
		p.dstLeader = l
	}
	sent := time.Now()
	cl := p.produceTo
	if cl == nil {
		cl = r.dst
	}
	kresp, err := cl.Broker(int(p.dstLeader)).Request(ctx, req)
	if err != nil {
		return 0, err
	}
	took := time.Since(sent)
	resp := kresp.(*kmsg.ProduceResponse)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("produce: response without the partition")
	}
	pp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(pp.ErrorCode); err != nil {
		return 0, err
	}
	// One request's ack, not the retries and backoff of produce: what a
	// producer writing D would wait for (latency.go).
	r.observeLatency(p.topic, took)
	return pp.BaseOffset, nil
}

func isKafkaErr(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke)
}

// errKind labels an error for metrics.
func errKind(err error) string {
	switch {
	case errors.Is(err, ErrSourceTopicMissing):
		return "source_topic_missing"
	case errors.Is(err, ErrSourceTopicRecreated):
		return "source_topic_recreated"
	case errors.Is(err, ErrDestinationDiverged):
		return "destination_diverged"
	case errors.Is(err, ErrUnsupported):
		return "unsupported"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return "other"
}
