package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/recordbatch"
)

// Two produce requests for one partition pipelined on one client
// connection; the leader moves after the first reached the old leader and
// before the agent dispatches the second, and the agent learns of the move
// in between. The second must not be written at the new leader while the
// first is still outstanding at the old one (see filter/route): directly, both
// would have gone to the old leader and failed alike.
func TestProduceStaysOnBrokerWhileOutstanding(t *testing.T) {
	t.Parallel()
	a, src, _ := startInternalAgent(t, embedded.DefaultBrokers, ForwardDeadline(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const topic = "pinned"
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil || resp.Err != nil {
		t.Fatalf("creating %s: %v %v", topic, err, resp.Err)
	}
	kc := src.Kfake()
	oldLeader := kc.LeaderFor(topic, 0)
	newLeader := (oldLeader + 1) % 3

	// Park the first produce at the old leader until released.
	held, release := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	unpark := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unpark)
	kc.ControlKey(0, func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		first := false
		holdOnce.Do(func() { first = true })
		if first {
			close(held)
			kc.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})

	nc, err := net.Dial("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	send := func(corr int32, value string) {
		req := kmsg.NewPtrProduceRequest()
		req.Version, req.Acks, req.TimeoutMillis = 7, -1, 30000
		req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: pinTestBatch(value)}}}}
		frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("pin-test")).AppendRequest(nil, req, corr)
		if _, err := nc.Write(frame); err != nil {
			t.Fatalf("writing produce %d: %v", corr, err)
		}
	}
	send(1, "first")
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the first produce never reached the old leader")
	}
	if err := kc.MoveTopicPartition(topic, 0, newLeader); err != nil {
		t.Fatal(err)
	}
	// The agent learns the new leader (as from another client's Metadata).
	if _, err := a.src.Metadata(ctx, []string{topic}, false); err != nil {
		t.Fatal(err)
	}
	if addr, ok := a.src.CachedLeader(topic, 0); !ok || addr != src.Addrs()[newLeader] {
		t.Fatalf("agent's leader for %s/0 is %q, want the new leader %s", topic, addr, src.Addrs()[newLeader])
	}
	send(2, "second")
	// Wait until the agent has sent the second one upstream.
	for a.inflight.count(topic) < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("the agent never forwarded the second produce (in flight: %d)", a.inflight.count(topic))
		case <-time.After(5 * time.Millisecond):
		}
	}
	unpark()

	br := bufio.NewReader(nc)
	for corr := int32(1); corr <= 2; corr++ {
		nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		var size [4]byte
		if _, err := io.ReadFull(br, size[:]); err != nil {
			t.Fatalf("reading response %d: %v", corr, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatalf("reading response %d: %v", corr, err)
		}
		if got := int32(binary.BigEndian.Uint32(body)); got != corr {
			t.Fatalf("response correlation id %d, want %d", got, corr)
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.Version = 7
		if err := resp.ReadFrom(body[4:]); err != nil {
			t.Fatalf("decoding response %d: %v", corr, err)
		}
		code := resp.Topics[0].Partitions[0].ErrorCode
		if code != kerr.NotLeaderForPartition.Code {
			t.Errorf("produce %d: error code %d (%v), want NOT_LEADER_OR_FOLLOWER from the old leader: the first was outstanding there, so the second must go there too",
				corr, code, kerr.ErrorForCode(code))
		}
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := ends.Lookup(topic, 0); o.Offset != 0 {
		t.Errorf("%s/0 holds %d records; the second produce was written ahead of the first", topic, o.Offset)
	}
}

// pinTestBatch is an uncompressed, non-idempotent v2 record batch of one
// record.
func pinTestBatch(value string) []byte { return pinTestSeqBatch(value, -1, -1, -1) }

// pinTestSeqBatch is pinTestBatch from producer pid, epoch, at sequence seq.
func pinTestSeqBatch(value string, pid int64, epoch int16, seq int32) []byte {
	return pinTestSeqBatchAt(value, pid, epoch, seq, time.Now().UnixMilli())
}

// pinTestSeqBatchAt is pinTestSeqBatch with the record's timestamp ts
// (Unix ms), which a client's resend of the record keeps.
func pinTestSeqBatchAt(value string, pid int64, epoch int16, seq int32, ts int64) []byte {
	var r []byte
	r = append(r, 0)              // attributes
	r = binary.AppendVarint(r, 0) // timestamp delta
	r = binary.AppendVarint(r, 0) // offset delta
	r = binary.AppendVarint(r, -1)
	r = binary.AppendVarint(r, int64(len(value)))
	r = append(r, value...)
	r = binary.AppendVarint(r, 0) // headers
	now := uint64(ts)
	b := binary.BigEndian.AppendUint64(nil, 0)
	b = binary.BigEndian.AppendUint32(b, 0) // length, below
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	b = append(b, 2)
	b = binary.BigEndian.AppendUint32(b, 0) // crc, below
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0) // last offset delta
	b = binary.BigEndian.AppendUint64(b, now)
	b = binary.BigEndian.AppendUint64(b, now)
	b = binary.BigEndian.AppendUint64(b, uint64(pid))
	b = binary.BigEndian.AppendUint16(b, uint16(epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(seq))
	b = binary.BigEndian.AppendUint32(b, 1) // records
	b = binary.AppendVarint(b, int64(len(r)))
	b = append(b, r...)
	binary.BigEndian.PutUint32(b[recordbatch.OffLength:], uint32(len(b)-recordbatch.LogOverhead))
	recordbatch.SetCRC(b)
	return b
}

// An idempotent producer's batch answered NOT_LEADER_OR_FOLLOWER leaves a
// gap: its later batches that the client sent before reading that answer
// must not be written ahead of it (see filter/route); the resend closes the gap.
func TestProduceAfterNotLeaderWaitsForTheResend(t *testing.T) {
	t.Parallel()
	a, src, _ := startInternalAgent(t, embedded.DefaultBrokers)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	const topic = "gap"
	cl, err := kgo.NewClient(kgo.SeedBrokers(src.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil || resp.Err != nil {
		t.Fatalf("creating %s: %v %v", topic, err, resp.Err)
	}
	ipid, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(ipid.ErrorCode)
	}
	if err != nil {
		t.Fatalf("InitProducerID: %v", err)
	}
	pid, epoch := ipid.ProducerID, ipid.ProducerEpoch

	// The agent learns the leader, which then moves without it knowing.
	kc := src.Kfake()
	if _, err := a.src.Metadata(ctx, []string{topic}, false); err != nil {
		t.Fatal(err)
	}
	if err := kc.MoveTopicPartition(topic, 0, (kc.LeaderFor(topic, 0)+1)%3); err != nil {
		t.Fatal(err)
	}

	conn := DialRaw(t, a.Addr())
	produce := func(_ int32, seq int32) (int16, int64) {
		return conn.Produce(topic, pinTestSeqBatch(fmt.Sprint("seq ", seq), pid, epoch, seq))
	}
	notLeader := kerr.NotLeaderForPartition.Code
	if code, _ := produce(1, 0); code != notLeader {
		t.Fatalf("seq 0 at the old leader: code %d, want NOT_LEADER_OR_FOLLOWER", code)
	}
	// Sent before the client read that answer: it must fail alike.
	if code, _ := produce(2, 1); code != notLeader {
		t.Fatalf("seq 1 after seq 0 failed and before its resend: code %d (%v), want NOT_LEADER_OR_FOLLOWER", code, kerr.ErrorForCode(code))
	}
	for i, seq := range []int32{0, 1} {
		code, off := produce(int32(3+i), seq)
		if code != 0 || off != int64(seq) {
			t.Fatalf("resent seq %d: code %d (%v) at offset %d, want success at %d", seq, code, kerr.ErrorForCode(code), off, seq)
		}
	}
}
