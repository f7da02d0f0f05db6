package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a child process this process started and reaps.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once Wait returned
	err  error         // Wait's result, set before done closes
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// The Linux parent-death signal fires when the *thread* that forked the child
// exits, not the process. Go may end an OS thread (a goroutine that exits
// while locked to it), so attached children are forked from one goroutine
// locked to a thread that never exits.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	res chan error
}

func spawnAttached(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for r := range spawner.reqs {
				r.res <- r.cmd.Start()
			}
		}()
	})
	res := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd, res}
	return <-res
}

// startProc starts cmd in its own process group. Attached, the child gets
// SIGKILL when this process dies; detached, it gets its own session and
// outlives us.
func startProc(cmd *exec.Cmd, detached bool) (*proc, error) {
	var err error
	if detached {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		err = cmd.Start()
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		err = spawnAttached(cmd)
	}
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// runAttached runs cmd to completion as an attached child, killing its
// process group if ctx ends first.
func runAttached(ctx context.Context, cmd *exec.Cmd) error {
	p, err := startProc(cmd, false)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
		return ctx.Err()
	}
}

// signalGroup signals pid's process group (every node leads its own), or
// pid alone if the group is gone.
func signalGroup(pid int, sig syscall.Signal) {
	if err := syscall.Kill(-pid, sig); err != nil {
		_ = syscall.Kill(pid, sig)
	}
}

// stopNode ends one node: SIGTERM, SIGKILL after grace. p is nil for a
// node of a cluster found by Open; then the pid is only signalled if its
// command line still names the node's folder (pids get reused).
func stopNode(n Node, p *proc, grace time.Duration) error {
	if n.PID <= 0 {
		return nil
	}
	var gone func() bool
	if p != nil {
		gone = func() bool { ok, _ := p.exited(); return ok }
	} else {
		gone = func() bool { return !isNodeProcess(n.PID, n.Dir) }
	}
	if gone() {
		return nil
	}
	signalGroup(n.PID, syscall.SIGTERM)
	if waitGone(p, gone, grace) {
		return nil
	}
	signalGroup(n.PID, syscall.SIGKILL)
	if waitGone(p, gone, 30*time.Second) {
		return nil
	}
	return fmt.Errorf("kafka: node %d (pid %d) still running after SIGKILL", n.ID, n.PID)
}

// waitGone waits up to d for the process to end: on its Wait when we are its
// parent, else by looking at /proc (there is no exit notification for a
// process that is not our child).
func waitGone(p *proc, gone func() bool, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	if p != nil {
		select {
		case <-p.done:
			return true
		case <-timer.C:
			return false
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !gone() {
		select {
		case <-tick.C:
		case <-timer.C:
			return gone()
		}
	}
	return true
}

// procCmdline returns pid's argv, or nil if the process is gone or a
// zombie.
func procCmdline(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// The state follows the parenthesised command name.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return nil
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(raw) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
}

// isNodeProcess reports whether pid is alive and is a java process whose
// command line names nodeDir.
func isNodeProcess(pid int, nodeDir string) bool {
	args := procCmdline(pid)
	return isJava(args) && strings.Contains(strings.Join(args, " "), nodeDir+string(filepath.Separator))
}

func isJava(args []string) bool { return len(args) > 0 && filepath.Base(args[0]) == "java" }

// Processes returns the pids of live java processes whose command line
// names a path under dir: the nodes of a cluster in dir and anything else
// the harness ran there.
func Processes(dir string) ([]int, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	marker := filepath.Clean(dir) + string(filepath.Separator)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("kafka: listing processes: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		args := procCmdline(pid)
		if isJava(args) && strings.Contains(strings.Join(args, " "), marker) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// killStragglers SIGKILLs every java process that names dir and waits for
// them to go.
func killStragglers(dir string) error {
	pids, err := Processes(dir)
	if err != nil || len(pids) == 0 {
		return err
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	var left []int
	for _, pid := range pids {
		if !waitGone(nil, func() bool { return procCmdline(pid) == nil }, 30*time.Second) {
			left = append(left, pid)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("kafka: java processes %v of %s survive SIGKILL", left, dir)
	}
	return nil
}

// tailFile returns the last n lines of path.
func tailFile(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	// Read back from the end until n newlines are seen (lines are short;
	// cap the read at 4 MiB).
	const chunk = 64 << 10
	size := st.Size()
	var buf []byte
	for off := size; off > 0 && bytes.Count(buf, []byte{'\n'}) <= n && int64(len(buf)) < 4<<20; {
		step := int64(chunk)
		if off < step {
			step = off
		}
		off -= step
		b := make([]byte, step)
		if _, err := f.ReadAt(b, off); err != nil {
			return "", err
		}
		buf = append(b, buf...)
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}

func logTail(nodes []Node, n int) string {
	var b strings.Builder
	for _, nd := range nodes {
		fmt.Fprintf(&b, "==> node %d (%s) %s <==\n", nd.ID, nd.Addr(), nd.Log())
		t, err := tailFile(nd.Log(), n)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				b.WriteString("(no log)\n")
				continue
			}
			fmt.Fprintf(&b, "(%v)\n", err)
			continue
		}
		b.WriteString(t)
		b.WriteString("\n")
	}
	return b.String()
}
