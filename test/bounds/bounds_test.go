package bounds

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
)

// agentProc is a `baton agent` child process.
type agentProc struct {
	cmd   *exec.Cmd
	addr  string // where producers connect
	admin string // /metrics
	log   *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var (
	listenLine = regexp.MustCompile(`msg="agent serving" listen=(\S+)`)
	adminLine  = regexp.MustCompile(`msg="admin endpoints" metrics=http://(\S+)/metrics`)
)

// buildBaton builds the baton binary into a temporary directory.
func buildBaton(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "baton")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/baton-kafka/baton/cmd/baton").CombinedOutput()
	if err != nil {
		t.Fatalf("building baton: %v\n%s", err, out)
	}
	return bin
}

func startAgent(t *testing.T, bin string, args ...string) *agentProc {
	t.Helper()
	p := &agentProc{log: &lockedBuffer{}}
	p.cmd = exec.Command(bin, append([]string{"agent", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { p.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("agent log:\n%s", p.log.String())
		}
	})
	wait.For(t, 60*time.Second, "the agent to serve", func() string {
		select {
		case <-exited:
			t.Fatalf("the agent exited: %v\n%s", p.cmd.ProcessState, p.log.String())
		default:
		}
		s := p.log.String()
		l, a := listenLine.FindStringSubmatch(s), adminLine.FindStringSubmatch(s)
		if l == nil || a == nil {
			return "log so far: " + s
		}
		p.addr, p.admin = l[1], a[1]
		return ""
	})
	return p
}

// rss is the process's resident memory in bytes, from /proc/PID/status.
func (p *agentProc) rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// metric reads one unlabelled sample from the agent's /metrics.
func (p *agentProc) metric(name string) (float64, error) {
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no %s in /metrics", name)
}

// kcatRoundTrip produces n records through addr with kcat and reads them
// back with kcat.
func kcatRoundTrip(ctx context.Context, addr, topic string, n int) error {
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, "%s-%d\n", topic, i)
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	prod := exec.CommandContext(ctx, "kcat", "-F", "none", "-P", "-b", addr, "-t", topic, "-X", "acks=all")
	prod.Stdin = strings.NewReader(in.String())
	if out, err := prod.CombinedOutput(); err != nil {
		return fmt.Errorf("kcat -P: %v: %s", err, out)
	}
	cons := exec.CommandContext(ctx, "kcat", "-F", "none", "-C", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-q")
	out, err := cons.Output()
	if err != nil {
		return fmt.Errorf("kcat -C: %v: %s", err, out)
	}
	if got := strings.Count(string(out), "\n"); got != n {
		return fmt.Errorf("kcat -C read %d records back, produced %d", got, n)
	}
	return nil
}

// TestHugeLengthPrefixesStayWithinTheBound: 50 connections each declare a
// 100 MiB frame (the largest the agent accepts by default) and then
// trickle bytes. The agent's resident memory must stay under its
// configured buffer bound (the default, 256 MiB) while kcat produces and
// consumes through it.
func TestHugeLengthPrefixesStayWithinTheBound(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat not installed (test/clients/install.sh installs it):", err)
	}
	const (
		attackers = 50
		bound     = agent.DefaultBuffered // --buffered-bytes left at its default
		declared  = 100 << 20
	)
	src, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dst, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	p := startAgent(t, buildBaton(t),
		"--source", src.Bootstrap(), "--destination", dst.Bootstrap(),
		// The attackers' frames must stay open for the whole test.
		"--frame-timeout", "10m")

	ctx := context.Background()
	if err := kcatRoundTrip(ctx, p.addr, "warmup", 100); err != nil {
		t.Fatal(err)
	}
	base := p.rss(t)

	// Sample RSS throughout.
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(wait.Poll)
		defer tick.Stop()
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
			if err == nil {
				if i := bytes.Index(b, []byte("VmRSS:")); i >= 0 {
					f := strings.Fields(string(b[i:]))
					if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb<<10 > peak.Load() {
						peak.Store(kb << 10)
					}
				}
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	// Three rounds of attackers, each: a 100 MiB length prefix and 1 KiB,
	// then 1 KiB per tick while kcat produces and consumes through the
	// agent; then they hang up and the next round dials. (Before frames
	// were read incrementally each connection allocated its declared size;
	// the first round's buffers were never touched, so barely resident, but
	// every later round's reused them and Go zeroes reused memory.)
	var buffered float64
	for round := range 3 {
		stopTrickle := make(chan struct{})
		var trickled sync.WaitGroup
		conns := make([]net.Conn, attackers)
		for i := range conns {
			nc, err := net.Dial("tcp", p.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { nc.Close() })
			conns[i] = nc
			if _, err := nc.Write(append(binary.BigEndian.AppendUint32(nil, declared), make([]byte, 1<<10)...)); err != nil {
				t.Fatal(err)
			}
			trickled.Add(1)
			go func() {
				defer trickled.Done()
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				chunk := make([]byte, 1<<10)
				for {
					select {
					case <-stopTrickle:
						return
					case <-tick.C:
						if _, err := nc.Write(chunk); err != nil {
							return
						}
					}
				}
			}()
		}
		wait.For(t, 30*time.Second, "every attacker connection open at the agent", func() string {
			n, err := p.metric("baton_agent_connections")
			if err != nil || n < attackers {
				return fmt.Sprintf("%v connections (%v)", n, err)
			}
			return ""
		})
		// kcat keeps working meanwhile.
		if err := kcatRoundTrip(ctx, p.addr, "during-"+strconv.Itoa(round), 200); err != nil {
			t.Fatalf("round %d: kcat through the agent under attack: %v", round, err)
		}
		if b, err := p.metric("baton_agent_buffered_request_bytes"); err != nil {
			t.Error(err)
		} else {
			buffered = max(buffered, b)
		}
		close(stopTrickle)
		trickled.Wait()
		for _, nc := range conns {
			if closedNow(nc) {
				t.Errorf("round %d: an attacker connection was closed by the agent (frame timeout 10m): %s", round, nc.LocalAddr())
				break
			}
			nc.Close()
		}
		wait.For(t, 30*time.Second, "the attackers' connections gone at the agent", func() string {
			n, err := p.metric("baton_agent_connections")
			if err != nil || n >= attackers {
				return fmt.Sprintf("%v connections (%v)", n, err)
			}
			return ""
		})
		t.Logf("round %d: VmRSS %d MiB (peak so far %d MiB)", round, p.rss(t)>>20, peak.Load()>>20)
	}
	close(stopSampling)
	<-sampled
	t.Logf("VmRSS: %d MiB before the attack, peak %d MiB; most buffered request bytes seen %.0f; bound %d MiB; %d connections a round declaring %d MiB each",
		base>>20, peak.Load()>>20, buffered, bound>>20, attackers, declared>>20)
	if peak.Load() >= bound {
		t.Fatalf("the agent's RSS reached %d MiB under the attack, bound %d MiB", peak.Load()>>20, bound>>20)
	}
}

// closedNow says whether the peer closed nc (a read sees EOF or a reset
// at once).
func closedNow(nc net.Conn) bool {
	nc.SetReadDeadline(time.Now().Add(wait.Poll))
	_, err := nc.Read(make([]byte, 1))
	return err == io.EOF || (err != nil && !os.IsTimeout(err))
}
