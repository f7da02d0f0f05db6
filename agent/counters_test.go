package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/bpf"
	"github.com/baton-kafka/baton/internal/wait"
)

// countingDialer dials like kgo and counts each connection's bytes in
// userspace on the client's side.
type countingDialer struct {
	mu    sync.Mutex
	conns []bpf.Conn
}

func (d *countingDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	tc := bpf.NewUserspace().Track(c)
	d.mu.Lock()
	d.conns = append(d.conns, tc)
	d.mu.Unlock()
	return tc, nil
}

// TestByteCountersThroughAgent produces through an agent counting in each
// implementation and checks, on the producer's connection, that the agent
// counted what the producer sent and received (the producer counts in
// userspace on its side), that the answered produce leaves nothing in
// flight, that the client id is the producer's, and that the agent says
// which implementation it uses in its gauge.
func TestByteCountersThroughAgent(t *testing.T) {
	t.Parallel()
	const (
		records  = 200
		clientID = "bytecount-producer"
	)
	cases := []struct {
		mode bpf.Mode
		want string
	}{
		{bpf.Userspace, bpf.ImplUserspace},
		{bpf.EBPF, bpf.ImplEBPF},
	}
	for _, c := range cases {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			if c.mode == bpf.EBPF {
				skipUnlessEBPF(t)
			}
			reg := prometheus.NewRegistry()
			f := startFixture(t, nil, agent.ByteCounters(c.mode), agent.Registry(reg))
			if got := f.agent.ByteCountersImpl(); got != c.want {
				t.Fatalf("ByteCountersImpl = %q, want %q", got, c.want)
			}
			if got := labeledGauge(t, reg, "baton_agent_byte_counters", "impl", c.want); got != 1 {
				t.Errorf("baton_agent_byte_counters{impl=%q} = %v, want 1", c.want, got)
			}
			createTopic(t, f.addr, "bytes", 1)
			d := &countingDialer{}
			cl := newClient(t, f.addr, kgo.Dialer(d.dial), kgo.ClientID(clientID), kgo.DefaultProduceTopic("bytes"),
				kgo.ProducerBatchCompression(kgo.NoCompression()))
			value := make([]byte, 1<<10)
			for i := range records {
				if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: value}).FirstErr(); err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
			}

			// The producer's connection is the one that sent the most.
			d.mu.Lock()
			var prod bpf.Conn
			for _, tc := range d.conns {
				if prod == nil || tc.Stats().Sent > prod.Stats().Sent {
					prod = tc
				}
			}
			d.mu.Unlock()
			// The agent counts a write once it returns, which can be after
			// the producer read the bytes: wait for the counts to settle.
			var st agent.ConnStat
			cs := prod.Stats()
			wait.For(t, 10*time.Second, "the agent's counts to reach the producer's", func() string {
				var ok bool
				if st, ok = connStatOf(f.agent, prod.LocalAddr().String()); !ok {
					return fmt.Sprintf("no agent connection from %s in %+v", prod.LocalAddr(), f.agent.ConnStats())
				}
				if cs = prod.Stats(); st.Sent != cs.Received || st.Received != cs.Sent || st.InFlight != 0 {
					return fmt.Sprintf("agent %+v, producer %+v", st.Stats, cs)
				}
				return ""
			})
			t.Logf("agent (%s): %+v; producer: %+v", st.Impl, st, cs)
			if st.Impl != c.want {
				t.Errorf("connection counted in %q, want %q", st.Impl, c.want)
			}
			if st.Received < records<<10 || st.Received != cs.Sent || st.Sent != cs.Received || st.Sent == 0 {
				t.Errorf("agent counted %d received and %d sent; the producer sent %d and received %d (%d records of 1 KiB)",
					st.Received, st.Sent, cs.Sent, cs.Received, records)
			}
			if st.InFlight != 0 {
				t.Errorf("InFlight = %d with every produce answered, want 0", st.InFlight)
			}
			if st.ClientID != clientID {
				t.Errorf("ClientID = %q, want %q", st.ClientID, clientID)
			}
			if one, ok := f.agent.ConnStat(st.ID); !ok || one.ID != st.ID {
				t.Errorf("ConnStat(%d) = %+v, %v", st.ID, one, ok)
			}
		})
	}
}

func TestByteCountersBadMode(t *testing.T) {
	t.Parallel()
	_, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Source("127.0.0.1:1"), agent.Destination("127.0.0.1:1"),
		agent.ByteCounters("kernel"))
	if !errors.Is(err, agent.ErrBadConfig) || !errors.Is(err, bpf.ErrBadMode) {
		t.Fatalf("New with byte counters %q: err = %v, want ErrBadConfig and bpf.ErrBadMode", "kernel", err)
	}
}

func connStatOf(a *agent.Agent, remote string) (agent.ConnStat, bool) {
	for _, s := range a.ConnStats() {
		if s.Remote == remote {
			return s, true
		}
	}
	return agent.ConnStat{}, false
}

// skipUnlessEBPF skips where eBPF cannot load (not root, no BTF); any
// other load error fails.
func skipUnlessEBPF(t *testing.T) {
	t.Helper()
	c, err := bpf.NewEBPF()
	switch {
	case err == nil:
		c.Close()
	case errors.Is(err, os.ErrPermission), errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, btf.ErrNotFound),
		errors.Is(err, bpf.ErrUnsupported):
		t.Skipf("eBPF cannot load here: %v", err)
	default:
		t.Fatalf("eBPF counters did not load: %v", err)
	}
}

func labeledGauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}
