package agent

import (
	"encoding/binary"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/xds"
)

// checkRoutes fails t unless routes are what a route table may hold: a
// named topic once, a known state, a positive hold.
func checkRoutes(t *testing.T, routes []Route) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range routes {
		switch {
		case r.Topic == "":
			t.Fatalf("route with no topic accepted: %+v", r)
		case seen[r.Topic]:
			t.Fatalf("topic %q accepted twice", r.Topic)
		case r.State < migration.Reject || r.State > migration.Complete:
			t.Fatalf("route %q with state %v accepted", r.Topic, r.State)
		case r.Mode != migration.Hold && r.Mode != migration.Retriable:
			t.Fatalf("route %q with mode %v accepted", r.Topic, r.Mode)
		}
		seen[r.Topic] = true
	}
}

// FuzzParseRoutes feeds arbitrary route files to the static parser: an
// error or routes a table may hold, never a panic.
func FuzzParseRoutes(f *testing.F) {
	f.Add([]byte("routes:\n  - topic: orders\n    state: PROXY\n  - topic: pay\n    state: MIGRATING\n    mode: retriable\n    holdMax: 2s\n"))
	f.Add([]byte("routes:\n  - topic: a\n    state: complete\n  - topic: a\n    state: REJECT\n"))
	f.Add([]byte("routes: [{topic: x, state: DONE}]"))
	f.Add([]byte("routes:\n  - topic: \"\"\n    state: PROXY\n"))
	f.Add([]byte("routes:\n  - topic: t\n    state: PROXY\n    holdMax: -1s\n"))
	f.Add([]byte("routes:\n  - {topic: t, state: PROXY, latencyEmulation: true, headroom: true, destinationLatency: {p50: 1ms, p99: -2ms}}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		routes, err := ParseRoutes(b)
		if err != nil {
			return
		}
		checkRoutes(t, routes)
		for _, r := range routes {
			if r.HoldMax <= 0 {
				t.Fatalf("route %q with hold %s accepted", r.Topic, r.HoldMax)
			}
			if l := r.Latency; l != nil && (l.P50 < 0 || l.P99 < 0) {
				t.Fatalf("route %q with latency %+v accepted", r.Topic, *l)
			}
		}
	})
}

// topicRoutes decodes fuzz bytes as TopicRoutes: per route a topic length
// byte and topic, then state, mode and a hold in milliseconds.
func topicRoutes(b []byte) []*batonv1.TopicRoute {
	var out []*batonv1.TopicRoute
	for len(b) > 0 {
		n := min(int(b[0]%8), len(b)-1)
		topic := string(b[1 : 1+n])
		b = b[1+n:]
		if len(b) < 4 {
			break
		}
		tr := &batonv1.TopicRoute{Topic: topic, State: batonv1.State(int8(b[0])), Mode: batonv1.HoldMode(int8(b[1])),
			HoldMax: durationpb.New(time.Duration(int16(binary.BigEndian.Uint16(b[2:]))) * time.Millisecond)}
		out = append(out, tr)
		b = b[4:]
	}
	return out
}

// FuzzApplyRoutes feeds arbitrary TopicRoutes to the xDS route update: it
// applies them all and the table then holds exactly them, or it refuses
// (NACK) and the table is as it was.
func FuzzApplyRoutes(f *testing.F) {
	f.Add([]byte("\x06orders\x02\x00\x03\xe8\x03pay\x03\x01\x00\x00"))
	f.Add([]byte("\x01b\x09\x00\x00\x00"))
	// The keeper never runs: the heartbeat applyRoutes asks for (Kick) is
	// never sent, and port 1 would refuse it.
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		a := &Agent{log: log, routes: NewRouteTable([]Route{{Topic: "before", State: migration.Proxy}}), cp: &cpLink{}}
		a.writes = newSourceWrites(true, a.routes)
		a.cp.keeper, err = xds.NewLeaseKeeper(conn, xds.NodeMeta("fuzz", "", ""), a.leaseReport, xds.ClientLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		trs := topicRoutes(b)
		before, v := a.routes.Snapshot()
		if err := a.applyRoutes(7, trs); err != nil {
			after, v2 := a.routes.Snapshot()
			if v2 != v || len(after) != len(before) || after[0] != before[0] {
				t.Fatalf("refused update changed the table: %+v", after)
			}
			return
		}
		after, _ := a.routes.Snapshot()
		checkRoutes(t, after)
		if len(after) != len(trs) {
			t.Fatalf("%d routes sent, %d applied", len(trs), len(after))
		}
	})
}
