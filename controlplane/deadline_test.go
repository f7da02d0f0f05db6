package controlplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// etcdProcess is an embedded etcd in a child process.
type etcdProcess struct {
	endpoint string
	proc     *os.Process
}

func startEtcdProcess(t *testing.T) *etcdProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), etcdChildEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case ep, ok := <-line:
		if !ok || ep == "" {
			t.Fatal("the etcd child exited before printing its endpoint")
		}
		return &etcdProcess{endpoint: ep, proc: cmd.Process}
	case <-time.After(60 * time.Second):
		t.Fatal("the etcd child printed no endpoint in 60s")
	}
	return nil
}

// liftHook runs onLift before lifting the real guard: the test stalls
// etcd exactly between the guard lift and the COMPLETE write.
type liftHook struct {
	WriteGuard
	onLift func()
}

func (g liftHook) Lift(ctx context.Context, topic string) error {
	g.onLift()
	return g.WriteGuard.Lift(ctx, topic)
}

// A cutover whose etcd stalls (SIGSTOP) after the guard was lifted times
// out at its deadline and rolls back: COMPLETE is not written once etcd
// answers again, long after the deadline.
func TestCutoverEtcdStallTimesOut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and an etcd process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	etcd := startEtcdProcess(t)
	st, err := OpenEtcd(ctx, []string{etcd.endpoint})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		stopped bool
	)
	hook := liftHook{WriteGuard: NoGuard{}, onLift: func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			if err := etcd.proc.Signal(syscall.SIGSTOP); err != nil {
				t.Errorf("SIGSTOP etcd: %v", err)
			}
			stopped = true
		}
	}}
	p := startPlaneStore(t, ctx, st, "", k, WithGuard(hook))
	a := startAgent(t, ctx, p.addr, "a")
	k.produce(t, ctx, "stall", 20)
	addAndMigrate(t, ctx, p, "stall", a)
	top, err := p.cp.Topic("stall")
	if err != nil || top.Cutover == nil {
		t.Fatalf("%+v, %v", top, err)
	}
	deadline := top.Cutover.Deadline
	wait.For(t, 30*time.Second, "the cutover reaches the guard lift", func() string {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			return "guard not lifted yet"
		}
		return ""
	})
	// etcd stays stopped until well past the deadline.
	wait.For(t, 30*time.Second, "the cutover deadline passes", func() string {
		if time.Now().Before(deadline.Add(time.Second)) {
			return "before the deadline + 1s"
		}
		return ""
	})
	if err := etcd.proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the cutover settles", func() bool {
		got, _ := p.cp.Topic("stall")
		return got.Cutover == nil && got.State != migration.Migrating
	})
	got, _ := p.cp.Topic("stall")
	evs := kinds(t, ctx, p, "stall")
	if got.State != migration.Proxy || slices.Contains(evs, EventCompleted) {
		t.Fatalf("after etcd stalled past the deadline: %s; events %s", got.State, strings.Join(eventLines(t, ctx, p, "stall"), "\n"))
	}
	wantEvents(t, ctx, p, "stall", EventGuardLifted, EventTimedOut, EventRolledBack, EventGuardRestored)
}

// etcdChildEnv makes the test binary an embedded etcd on the directory it
// names (see startEtcdProcess): a process of its own can be stalled with
// SIGSTOP, which an etcd inside the test process cannot.
const etcdChildEnv = "BATON_TEST_ETCD_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(etcdChildEnv); dir != "" {
		os.Exit(runEtcdChild(dir))
	}
	os.Exit(m.Run())
}

// runEtcdChild serves etcd on dir, prints its client endpoint and runs
// until its stdin closes (the parent ended it, or died).
func runEtcdChild(dir string) int {
	s, err := OpenEmbedded(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	fmt.Println(s.Client().Endpoints()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}
