package replicator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/replicator"
)

// waitRejected waits until every partition of topic reports a copy error
// that wraps ErrDestinationRejected and want, and returns the status.
func waitRejected(t *testing.T, rn *running, topic string, want error) replicator.TopicStatus {
	t.Helper()
	var ts replicator.TopicStatus
	wait.For(t, time.Minute, fmt.Sprintf("%v reported for every partition of %s", want, topic), func() string {
		ts = topicStatus(rn, topic)
		if !ts.Ready || len(ts.Partitions) == 0 {
			return fmt.Sprintf("not set up: %+v", ts)
		}
		for _, ps := range ts.Partitions {
			if !errors.Is(ps.Err, replicator.ErrDestinationRejected) || !errors.Is(ps.Err, want) {
				return fmt.Sprintf("partition %d: %v", ps.Partition, ps.Err)
			}
		}
		return ""
	})
	return ts
}

// gaugeValue returns the value of metric name with exactly labels, and
// whether it exists.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func dstEndOffsets(t *testing.T, seeds []string, topic string, opts ...kgo.Opt) kadm.ListedOffsets {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	return ends
}

// TestDestinationRecordTooLarge: D.T's max.message.bytes is below one
// source batch. The partition stops at that batch with MESSAGE_TOO_LARGE in
// Status and the partition error gauge, copies nothing after it, and once
// the limit is raised copies the rest with exact parity.
func TestDestinationRecordTooLarge(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	ctx := context.Background()
	const topic = "big"
	scl, err := kgo.NewClient(kgo.SeedBrokers(src...), kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer scl.Close()
	dcl, err := kgo.NewClient(kgo.SeedBrokers(dst...))
	if err != nil {
		t.Fatal(err)
	}
	defer dcl.Close()
	if _, err := kadm.NewClient(scl).CreateTopic(ctx, 1, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	small := "2048"
	if _, err := kadm.NewClient(dcl).CreateTopic(ctx, 1, -1, map[string]*string{"max.message.bytes": &small}, topic); err != nil {
		t.Fatal(err)
	}
	const before, after = 10, 10
	for i := range before + 1 + after {
		v := []byte(fmt.Sprint("small ", i))
		if i == before {
			v = []byte(strings.Repeat("L", 8<<10)) // one batch over 2 KiB
		}
		if err := scl.ProduceSync(ctx, &kgo.Record{Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewRegistry()
	rn := run(t, src, dst, replicator.Topics(topic), replicator.MaxBackoff(200*time.Millisecond), replicator.Registry(reg))
	defer rn.stop(t)
	ts := waitRejected(t, rn, topic, kerr.MessageTooLarge)
	ps := ts.Partitions[0]
	if !strings.Contains(ps.Err.Error(), topic+"/0") || !strings.Contains(ps.Err.Error(), fmt.Sprint("source offset ", before)) {
		t.Errorf("error does not name the partition and offset: %v", ps.Err)
	}
	if ps.Next != before || ps.DestinationEnd != before {
		t.Errorf("partition status %+v, want next = destination end = %d", ps, before)
	}
	// Nothing after the refused batch was copied: no skip.
	if e, _ := dstEndOffsets(t, dst, topic).Lookup(topic, 0); e.Offset != before {
		t.Fatalf("destination end %d while the batch at %d is refused", e.Offset, before)
	}
	labels := map[string]string{"topic": topic, "partition": "0", "kind": kerr.MessageTooLarge.Message}
	if v, ok := gaugeValue(t, reg, "baton_replicator_partition_error", labels); !ok || v != 1 {
		t.Errorf("partition error gauge %v %v, want 1", v, ok)
	}

	// The operator raises the limit: the copy continues where it stopped.
	if _, err := kadm.NewClient(dcl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kmsg.StringPtr("1048588")}}, topic); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, rn, src, topic)
	for _, ps := range rn.r.Status()[0].Partitions {
		if ps.Err != nil {
			t.Errorf("partition %d still failing after catching up: %v", ps.Partition, ps.Err)
		}
	}
	if _, ok := gaugeValue(t, reg, "baton_replicator_partition_error", labels); ok {
		t.Error("partition error gauge left set after the copy resumed")
	}
	requireParity(t, src, dst, topic, replicator.ParityExact, before+1+after)
}

// TestDestinationWriteDenied: D has SASL and ACLs, and the replicator's
// principal is denied WRITE on the topic. Every partition reports
// TOPIC_AUTHORIZATION_FAILED and nothing lands on D; once the deny ACL is
// deleted the copy completes with exact parity.
func TestDestinationWriteDenied(t *testing.T) {
	t.Parallel()
	const topic = "acl"
	s, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	allow := func(res kmsg.ACLResourceType, name string) kfake.ACL {
		return kfake.ACL{Resource: res, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAll, Allow: true}
	}
	d, err := embedded.Start(embedded.Brokers(1), embedded.KfakeOpts(
		kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin-secret"),
		kfake.User("PLAIN", "replicator", "replicator-secret",
			allow(kmsg.ACLResourceTypeCluster, "kafka-cluster"), allow(kmsg.ACLResourceTypeTopic, "*"), allow(kmsg.ACLResourceTypeGroup, "*"),
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral,
				Operation: kmsg.ACLOperationWrite, Allow: false}),
	))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	src, dst := s.Addrs(), d.Addrs()
	admin := []kgo.Opt{kgo.SASL(plain.Auth{User: "admin", Pass: "admin-secret"}.AsMechanism())}
	const n = 300
	produceMatrix(t, src, topic, n)

	rn := run(t, src, dst, replicator.Topics(topic), replicator.MaxBackoff(200*time.Millisecond),
		replicator.DestinationClientOpts(kgo.SASL(plain.Auth{User: "replicator", Pass: "replicator-secret"}.AsMechanism())))
	defer rn.stop(t)
	ts := waitRejected(t, rn, topic, kerr.TopicAuthorizationFailed)
	if len(ts.Partitions) != embedded.DefaultPartitions {
		t.Fatalf("%d partitions reported", len(ts.Partitions))
	}
	dstEndOffsets(t, dst, topic, admin...).Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("partition %d: %d records on D while writes are denied", o.Partition, o.Offset)
		}
	})

	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(dst...)}, admin...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	del := kadm.NewACLs().Topics(topic).Deny("User:replicator").DenyHosts("*").Operations(kadm.OpWrite).
		ResourcePatternType(kadm.ACLPatternLiteral)
	res, err := kadm.NewClient(cl).DeleteACLs(context.Background(), del)
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		deleted += len(r.Deleted)
	}
	if deleted != 1 {
		t.Fatalf("deleted %d ACLs, want the one deny", deleted)
	}
	waitCaughtUp(t, rn, src, topic)
	for _, ps := range rn.r.Status()[0].Partitions {
		if ps.Err != nil {
			t.Errorf("partition %d still failing after catching up: %v", ps.Partition, ps.Err)
		}
	}
	rep, err := replicator.VerifyWithOpts(context.Background(), src, dst, topic, replicator.DefaultOffsetMapTopic, nil, admin)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, p := range rep.Partitions {
		total += p.Records
		if p.Parity != replicator.ParityExact {
			t.Errorf("partition %d parity %s", p.Partition, p.Parity)
		}
	}
	for _, m := range rep.Mismatches {
		t.Errorf("mismatch: %v", m)
	}
	if total != n {
		t.Errorf("verified %d records, want %d", total, n)
	}
}

// TestStaleSegmentsWithdrawn: the offset map on D holds a segment beyond
// D's end, as a process that stopped between a segment and its batch
// leaves it. The next run withdraws it before copying, so it cannot
// mistranslate the records copied there (compaction may have changed the
// source since): parity stays exact and the map topic keeps no trace.
func TestStaleSegmentsWithdrawn(t *testing.T) {
	t.Parallel()
	src, dst := startPair(t)
	const topic = "stale"
	produceMatrix(t, src, topic, 500)
	cl, err := kgo.NewClient(kgo.SeedBrokers(dst...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	compact := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, -1, map[string]*string{"cleanup.policy": &compact},
		replicator.DefaultOffsetMapTopic); err != nil {
		t.Fatal(err)
	}
	v := fmt.Sprintf(`{"topic":%q,"partition":0,"dst":5,"src":99}`, topic)
	rec := &kgo.Record{Topic: replicator.DefaultOffsetMapTopic, Key: []byte(topic + "/0/5"), Value: []byte(v)}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	before, err := replicator.LoadOffsetMaps(context.Background(), dst, replicator.DefaultOffsetMapTopic)
	if err != nil {
		t.Fatal(err)
	}
	if before[topic].Exact(0) {
		t.Fatal("the planted segment was not loaded")
	}

	rn := run(t, src, dst, replicator.Topics(topic))
	defer rn.stop(t)
	waitCaughtUp(t, rn, src, topic)
	requireParity(t, src, dst, topic, replicator.ParityExact, 500)
	after, err := replicator.LoadOffsetMaps(context.Background(), dst, replicator.DefaultOffsetMapTopic)
	if err != nil {
		t.Fatal(err)
	}
	if segs := after[topic][0]; len(segs) != 0 {
		t.Errorf("segments left for partition 0: %+v", segs)
	}
}
