package controlplane

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	batonv1 "github.com/baton-kafka/baton/api/baton/v1"
	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// Rolling back never waits for the destination: with D down an abort
// returns the topic to PROXY at once, a restarted control plane starts and
// rolls back a cutover it finds in flight, and the write guard comes back
// in the background (shown in status, refusing a cutover until then) once
// D answers again.
func TestRollbackWithDestinationDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	_, port, err := net.SplitHostPort(k.dst.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	dstPort, _ := strconv.Atoi(port)
	gcl, err := kgo.NewClient(kgo.SeedBrokers(k.dst.Addrs()...), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gcl.Close)
	adm := kadm.NewClient(gcl)
	guard := &acl.Guard{Admin: adm, Replicator: "User:repl"}

	dir := t.TempDir()
	p := startPlane(t, ctx, dir, "", k, WithGuard(guard))
	addr := p.addr
	a, holder := startAgent(t, ctx, addr, "a"), startAgent(t, ctx, addr, "holder")
	for _, topic := range []string{"rb-abort", "rb-restart"} {
		k.produce(t, ctx, topic, 10)
		if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: topic}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	waitLeases(t, ctx, p, a, holder)
	holder.mu.Lock()
	holder.stuck = true // the cutovers wait on it until aborted
	holder.mu.Unlock()
	for _, topic := range []string{"rb-abort", "rb-restart"} {
		migrateWhenGateOpens(t, ctx, p, topic)
		wantEvents(t, ctx, p, topic, EventInitiated, EventWaitingOnAgent)
	}

	k.dst.Close() // D unreachable from here on: connections refused

	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	got, err := p.cp.Abort(actx, "rb-abort", "operator", "destination down")
	acancel()
	if err != nil || got.State != migration.Proxy {
		t.Fatalf("abort with the destination down: %v, %v; events %v", got.State, err, eventLines(t, ctx, p, "rb-abort"))
	}
	eventually(t, ctx, "agent forwards rb-abort again", func() bool { return a.state("rb-abort") == batonv1.State_STATE_PROXY })
	wait.For(t, 30*time.Second, "status shows the guard restore failing", func() string {
		st, err := p.cp.Status("rb-abort")
		if err != nil {
			return err.Error()
		}
		if st.GuardRestore == nil || st.GuardRestore.Failures == 0 {
			return "no failed restore in status"
		}
		return ""
	})
	wantEvents(t, ctx, p, "rb-abort", EventAborted, EventRolledBack, EventGuardRestoreFailed)
	if _, err := p.cp.Migrate(ctx, "rb-abort", "test"); !errors.Is(err, ErrGateRefused) || !strings.Contains(err.Error(), "write guard") {
		t.Errorf("migrate while the guard is not restored: %v", err)
	}

	p.stop() // rb-restart is MIGRATING in etcd
	p = startPlane(t, ctx, dir, addr, k, WithGuard(guard))
	top, err := p.cp.Topic("rb-restart")
	if err != nil || top.State != migration.Proxy || top.Cutover != nil {
		t.Fatalf("after a restart with the destination down: %+v, %v", top, err)
	}
	eventually(t, ctx, "agent forwards rb-restart again", func() bool { return a.state("rb-restart") == batonv1.State_STATE_PROXY })
	wantEvents(t, ctx, p, "rb-restart", EventRecovered, EventRolledBack)

	back, err := embedded.Start(embedded.Brokers(1), embedded.Partitions(2), embedded.FirstPort(dstPort))
	if err != nil {
		t.Fatalf("restarting the destination on port %d: %v", dstPort, err)
	}
	t.Cleanup(back.Close)
	for _, topic := range []string{"rb-abort", "rb-restart"} {
		wait.For(t, 60*time.Second, topic+"'s guard restored", func() string {
			st, err := p.cp.Status(topic)
			if err != nil {
				return err.Error()
			}
			if st.GuardRestore != nil {
				return "still restoring: " + st.GuardRestore.LastErr
			}
			return ""
		})
		wantEvents(t, ctx, p, topic, EventGuardRestored)
		res, err := adm.DescribeACLs(ctx, kadm.NewACLs().Topics(topic).Allow("User:repl").AllowHosts().
			Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, r := range res {
			found = found || slices.ContainsFunc(r.Described, func(d kadm.DescribedACL) bool { return d.Principal == "User:repl" })
		}
		if !found {
			t.Errorf("%s: no ALLOW WRITE for the replicator on the restarted destination", topic)
		}
	}
}
