package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
)

// batonChildEnv makes the test binary run baton's main on its arguments
// instead of the tests (see runControlPlane): a command in a process of its
// own, started with its flags and stopped by SIGTERM as an operator's is.
const batonChildEnv = "BATON_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(batonChildEnv) == "1" {
		main() // exits 1 on an error
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// upLine is the control plane's "control plane up" log line; its http
// attribute is the API's URL.
var upLine = regexp.MustCompile(`msg="control plane up" .*http=(https?://\S+)`)

// startControlPlane runs `baton controlplane args...` in a process of its
// own until the test ends, and returns its API's URL and its log.
func startControlPlane(t *testing.T, args ...string) (api string, log *testlog.Buffer) {
	t.Helper()
	p := runControlPlane(t, args...)
	log = p.log
	wait.For(t, 2*time.Minute, "the control plane to come up", func() string {
		select {
		case <-p.exited:
			t.Fatalf("the control plane exited:\n%s", log)
		default:
		}
		if m := upLine.FindStringSubmatch(log.String()); m != nil {
			api = m[1]
			return ""
		}
		return "no \"control plane up\" yet; log:\n" + log.String()
	})
	return api, log
}

// controlPlaneProc is a `baton` process of a test's (a control plane's,
// mostly).
type controlPlaneProc struct {
	log    *testlog.Buffer
	exited <-chan struct{}
	proc   *os.Process
}

// kill ends the process with SIGKILL and waits for it.
func (p *controlPlaneProc) kill() { _ = p.proc.Kill(); <-p.exited }

// runControlPlane starts `baton controlplane args...` in a process of its
// own, stopped with SIGTERM when the test ends (SIGKILL 20 s later).
func runControlPlane(t *testing.T, args ...string) *controlPlaneProc {
	t.Helper()
	if !slices.Contains(args, "--source-fence") {
		// The tests' kfake sources answer DescribeACLs but, without
		// EnableACLs, enforce nothing: a fence there would be a promise
		// nobody keeps.
		args = append(args, "--source-fence", "none")
	}
	return runBaton(t, append([]string{"controlplane"}, args...)...)
}

// runBaton starts `baton args...` in a process of its own, stopped with
// SIGTERM when the test ends (SIGKILL 20 s later).
func runBaton(t *testing.T, args ...string) *controlPlaneProc {
	t.Helper()
	return runBatonEnv(t, nil, args...)
}

// runBatonEnv is runBaton with env (KEY=value) added to the process's
// environment.
func runBatonEnv(t *testing.T, env []string, args ...string) *controlPlaneProc {
	t.Helper()
	log := &testlog.Buffer{}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), env...), batonChildEnv+"=1")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p := &controlPlaneProc{log: log, exited: done, proc: cmd.Process}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a test may have stopped it
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			p.kill()
		}
	})
	return p
}
