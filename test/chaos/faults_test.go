package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// kind is one kind of scheduled event: a fault or an operator action.
type kind int

const (
	sourceBrokerKill kind = iota // SIGKILL a source broker, restart it
	destBrokerKill               // SIGKILL the destination broker, restart it
	agentKill                    // SIGKILL an agent, restart it
	agentPause                   // SIGSTOP an agent, SIGCONT it
	agentCutOff                  // DROP everything between an agent and the control plane
	cpKillProxy                  // SIGKILL the control plane while topics are in PROXY, restart it
	cpKillMigrating              // migrate a topic, SIGKILL the control plane during MIGRATING, restart it
	replicationStall             // reset every replicator connection to D, again and again
	slowDestination              // SIGSTOP the destination broker briefly
	numFaults                    // faults are the kinds above
	opMigrate                    // baton topic migrate
	opAbort                      // baton topic abort
)

var kindNames = map[kind]string{
	sourceBrokerKill: "source-broker-kill", destBrokerKill: "dest-broker-kill", agentKill: "agent-kill",
	agentPause: "agent-pause", agentCutOff: "agent-cut-off", cpKillProxy: "controlplane-kill-proxy",
	cpKillMigrating: "controlplane-kill-migrating", replicationStall: "replication-stall",
	slowDestination: "slow-destination", opMigrate: "migrate", opAbort: "abort",
}

// holds is how long each fault lasts: [min, max).
var holds = map[kind][2]time.Duration{
	sourceBrokerKill: {2 * time.Second, 6 * time.Second},
	destBrokerKill:   {1 * time.Second, 4 * time.Second},
	agentKill:        {500 * time.Millisecond, 3 * time.Second},
	agentPause:       {1 * time.Second, 4 * time.Second},
	// Past the 5 s lease sometimes: the agent must stop forwarding.
	agentCutOff:      {2 * time.Second, 9 * time.Second},
	cpKillProxy:      {500 * time.Millisecond, 4 * time.Second},
	cpKillMigrating:  {500 * time.Millisecond, 4 * time.Second},
	replicationStall: {2 * time.Second, 8 * time.Second},
	slowDestination:  {500 * time.Millisecond, 3 * time.Second},
}

// event is one scheduled step.
type event struct {
	at     time.Duration // since producing began
	kind   kind
	target int           // which broker or agent
	topic  string        // for migrate, abort and cpKillMigrating
	hold   time.Duration // how long the fault lasts
	delay  time.Duration // cpKillMigrating: from migrate to the kill
}

func (e event) String() string {
	s := kindNames[e.kind]
	switch e.kind {
	case sourceBrokerKill, agentKill, agentPause, agentCutOff:
		s += " #" + strconv.Itoa(e.target)
	}
	if e.topic != "" {
		s += " " + e.topic
	}
	if e.kind == cpKillMigrating {
		s += fmt.Sprintf(" (kill %.1fs after migrate)", e.delay.Seconds())
	}
	if e.hold > 0 {
		s += fmt.Sprintf(" for %.1fs", e.hold.Seconds())
	}
	return s
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// drawSchedule draws a run's events from rng: faults one after another (each
// healed before the next starts, so that a failure names one fault), and
// per topic one migrate at a random moment, sometimes followed by an abort.
// Nothing starts in the last 8 s of producing, so the run ends healed.
func drawSchedule(rng *rand.Rand, dur time.Duration, topics []string) []event {
	var out []event
	end := dur - 8*time.Second
	for at := between(rng, 2*time.Second, 4*time.Second); at < end; {
		e := event{at: at, kind: kind(rng.IntN(int(numFaults)))}
		h := holds[e.kind]
		e.hold = between(rng, h[0], h[1])
		switch e.kind {
		case sourceBrokerKill:
			e.target = rng.IntN(3)
		case agentKill, agentPause, agentCutOff:
			e.target = rng.IntN(2)
		case cpKillMigrating:
			e.topic = topics[rng.IntN(len(topics))]
			e.delay = between(rng, 100*time.Millisecond, 2*time.Second)
		}
		out = append(out, e)
		// A broker restart takes a few seconds more than the hold.
		at += e.hold + e.delay + between(rng, time.Second, 4*time.Second)
	}
	for _, tp := range topics {
		m := event{at: between(rng, 4*time.Second, end), kind: opMigrate, topic: tp}
		out = append(out, m)
		if rng.IntN(3) == 0 {
			out = append(out, event{at: m.at + between(rng, 200*time.Millisecond, 3*time.Second), kind: opAbort, topic: tp})
		}
	}
	return out
}

// play runs the schedule: faults in order on this goroutine, operator
// actions on another. It returns when every fault is healed.
func (w *world) play(ctx context.Context, sched []event) {
	var ops, faults []event
	for _, e := range sched {
		if e.kind == opMigrate || e.kind == opAbort {
			ops = append(ops, e)
		} else {
			faults = append(faults, e)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sortByAt(ops)
		for _, e := range ops {
			if !w.sleepUntil(ctx, e.at) {
				return
			}
			w.op(ctx, e.kind, e.topic)
		}
	}()
	for _, e := range faults {
		if !w.sleepUntil(ctx, e.at) {
			break
		}
		// A slow restart can push the schedule past producing; faults
		// then would hit idle producers and keep the run from ending
		// healed.
		if late := time.Since(w.start); late > w.s.dur-8*time.Second {
			w.logf("skipped %s: the schedule overran (t+%.1fs)", e, late.Seconds())
			continue
		}
		w.fault(ctx, e)
	}
	wg.Wait()
}

func sortByAt(es []event) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].at < es[j-1].at; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// sleepUntil sleeps until the run's clock reads at; the schedule's clock,
// not a wait for a condition.
func (w *world) sleepUntil(ctx context.Context, at time.Duration) bool {
	return w.sleep(ctx, time.Until(w.start.Add(at)))
}

func (w *world) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// op runs an operator action through the CLI, as an operator would.
func (w *world) op(ctx context.Context, k kind, topic string) {
	args := []string{"topic", kindNames[k], topic, "--server", w.api.Base, "--actor", "chaos"}
	if k == opAbort {
		args = append(args, "--reason", "chaos schedule")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, w.s.bin, args...).CombinedOutput()
	if err != nil {
		w.logf("op %s %s: refused or failed: %v: %s", kindNames[k], topic, err, lastLine(out))
		return
	}
	w.logf("op %s %s: %s", kindNames[k], topic, lastLine(out))
}

func lastLine(b []byte) string {
	s := string(b)
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ') {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return s[i+1:]
		}
	}
	return s
}

func (w *world) fault(ctx context.Context, e event) {
	t := w.t
	w.logf("fault %s", e)
	switch e.kind {
	case sourceBrokerKill:
		id := w.s.src.Nodes()[e.target].ID
		if err := w.s.src.StopNode(id, 0); err != nil {
			t.Fatalf("killing source node %d: %v", id, err)
		}
		w.sleep(ctx, e.hold)
		if err := w.s.src.RestartNode(ctx, id); err != nil {
			t.Fatalf("restarting source node %d: %v", id, err)
		}
	case destBrokerKill:
		id := w.s.dst.Nodes()[0].ID
		if err := w.s.dst.StopNode(id, 0); err != nil {
			t.Fatalf("killing destination node %d: %v", id, err)
		}
		w.sleep(ctx, e.hold)
		if err := w.s.dst.RestartNode(ctx, id); err != nil {
			t.Fatalf("restarting destination node %d: %v", id, err)
		}
	case agentKill:
		a := w.agents[e.target]
		a.kill()
		w.sleep(ctx, e.hold)
		if err := a.start(); err != nil {
			t.Fatal(err)
		}
	case agentPause:
		a := w.agents[e.target]
		if err := a.signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		w.sleep(ctx, e.hold)
		if err := a.signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	case agentCutOff:
		n := w.nets[e.target]
		if err := n.Cut(); err != nil {
			t.Fatalf("cutting agent-%d off: %v", e.target, err)
		}
		w.sleep(ctx, e.hold)
		if err := n.Heal(); err != nil {
			t.Fatalf("healing agent-%d: %v", e.target, err)
		}
	case cpKillProxy, cpKillMigrating:
		if e.kind == cpKillMigrating {
			w.op(ctx, opMigrate, e.topic)
			w.sleep(ctx, e.delay)
		}
		w.cp.kill()
		w.logf("control plane killed")
		w.sleep(ctx, e.hold)
		if err := w.cp.start(); err != nil {
			t.Fatal(err)
		}
		w.waitControlPlane(60 * time.Second)
	case replicationStall:
		w.stallReplication(ctx, e.hold)
	case slowDestination:
		pid := w.s.dst.Nodes()[0].PID
		if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("stopping the destination broker: %v", err)
		}
		w.sleep(ctx, e.hold)
		if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
			t.Fatalf("continuing the destination broker: %v", err)
		}
	}
	w.logf("healed %s", kindNames[e.kind])
}

var ssPid = regexp.MustCompile(`127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:\d+\s+users:\(\("[^"]*",pid=(\d+),`)

// stallReplication resets, with ss -K, every connection of the control
// plane's process (the replicator runs in it) to the destination broker,
// every 100 ms for d: the replicator reconnects and is reset again, so
// nothing reaches D.
func (w *world) stallReplication(ctx context.Context, d time.Duration) {
	dport := w.s.dst.Nodes()[0].Port
	cpPid := strconv.Itoa(w.cp.pid())
	resets := 0
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		out, err := exec.CommandContext(ctx, "ss", "-tnpH", "state", "established", "dport", "= :"+strconv.Itoa(dport)).Output()
		if err != nil {
			w.t.Fatalf("ss: %v", err)
		}
		for _, m := range ssPid.FindAllStringSubmatch(string(out), -1) {
			if m[2] != cpPid {
				continue
			}
			if err := exec.CommandContext(ctx, "ss", "-K", "sport", "= :"+m[1], "dport", "= :"+strconv.Itoa(dport)).Run(); err == nil {
				resets++
			}
		}
		if !w.sleep(ctx, 100*time.Millisecond) {
			return
		}
	}
	w.logf("replication stall: %d connections reset", resets)
}
