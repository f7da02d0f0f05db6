package chaos

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// netSlots bounds how many agent namespaces exist on the machine at once;
// slot n owns 10.231.n.0/30 (host .1, namespace .2) and the interface and
// namespace names derived from n.
const netSlots = 64

// agentNet is where an agent runs and how the suite cuts it off from the
// control plane: a network namespace of its own (the real thing) or, where
// the kernel or privileges do not allow one, a relay in this process.
type agentNet interface {
	// Host is the address the agent listens on and producers dial.
	Host() string
	// Wrap returns the command that runs bin with args in the agent's
	// network.
	Wrap(bin string, args []string) *exec.Cmd
	// ControlPlane is the control-plane address the agent is given.
	ControlPlane() string
	// Cut drops every packet between the agent and the control plane;
	// Heal lets them through again.
	Cut() error
	Heal() error
	Close() error
}

// netnsSupport says why agents cannot get namespaces here ("" when they
// can): it needs root, ip(8) and iptables(8).
func netnsSupport() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	for _, b := range []string{"ip", "iptables", "sysctl"} {
		if _, err := exec.LookPath(b); err != nil {
			return b + " not installed (make test-deps installs iptables)"
		}
	}
	if err := run("ip", "netns", "list"); err != nil {
		return "ip netns unusable: " + err.Error()
	}
	return ""
}

// run runs a command and returns its output in the error when it fails.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netns is an agent's network namespace: a veth pair to the host, and NAT so
// that the agent reaches the brokers and the control plane, which listen on
// the host's 127.0.0.1, at their usual 127.0.0.1 addresses (the brokers
// advertise those): inside, 127.0.0.1 TCP is rewritten to the host end of
// the veth; on the host, traffic in from that veth is rewritten back to
// 127.0.0.1. Only this namespace's own traffic matches either rule.
type netns struct {
	slot         int
	name         string
	hostIf, nsIf string
	hostIP, nsIP string
	cpPort       int
	lock         *os.File
	cutMu        sync.Mutex
	cut          bool
	hostRule     []string
}

// newNetns takes a free slot (flocked machine-wide) and builds its
// namespace. cpPort is the control plane's gRPC port on 127.0.0.1.
func newNetns(cpPort int) (*netns, error) {
	dir := filepath.Join(os.TempDir(), "baton-chaos-netns")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	for slot := 0; slot < netSlots; slot++ {
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(slot)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			continue
		}
		n := &netns{slot: slot, name: fmt.Sprintf("baton-chaos-%d", slot),
			hostIf: fmt.Sprintf("bch%dh", slot), nsIf: fmt.Sprintf("bch%dn", slot),
			hostIP: fmt.Sprintf("10.231.%d.1", slot), nsIP: fmt.Sprintf("10.231.%d.2", slot),
			cpPort: cpPort, lock: f}
		n.hostRule = []string{"-t", "nat", "PREROUTING", "-i", n.hostIf, "-p", "tcp", "-d", n.hostIP, "-j", "DNAT", "--to-destination", "127.0.0.1"}
		n.teardown() // leftovers of a run that died holding this slot
		if err := n.setup(); err != nil {
			_ = n.Close()
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("chaos: all %d namespace slots are taken", netSlots)
}

func (n *netns) in(args ...string) error {
	return run("ip", append([]string{"netns", "exec", n.name}, args...)...)
}

func (n *netns) rule(op string, r []string) []string {
	// r is "-t table CHAIN rest..."; iptables wants "-t table -A CHAIN rest".
	return append([]string{r[0], r[1], op, r[2]}, r[3:]...)
}

func (n *netns) setup() error {
	steps := [][]string{
		{"ip", "netns", "add", n.name},
		{"ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", n.nsIf},
		{"ip", "link", "set", n.nsIf, "netns", n.name},
		{"ip", "addr", "add", n.hostIP + "/30", "dev", n.hostIf},
		{"ip", "link", "set", n.hostIf, "up"},
		{"sysctl", "-qw", "net.ipv4.conf." + n.hostIf + ".route_localnet=1"},
		append([]string{"iptables"}, n.rule("-A", n.hostRule)...),
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	inside := [][]string{
		{"ip", "addr", "add", n.nsIP + "/30", "dev", n.nsIf},
		{"ip", "link", "set", n.nsIf, "up"},
		{"ip", "link", "set", "lo", "up"},
		{"sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1"},
		{"iptables", "-t", "nat", "-A", "OUTPUT", "-d", "127.0.0.1/32", "-p", "tcp", "-j", "DNAT", "--to-destination", n.hostIP},
		{"iptables", "-t", "nat", "-A", "POSTROUTING", "-o", n.nsIf, "-j", "MASQUERADE"},
	}
	for _, s := range inside {
		if err := n.in(s...); err != nil {
			return err
		}
	}
	return nil
}

// teardown removes whatever of the slot's plumbing exists, ignoring what
// does not.
func (n *netns) teardown() {
	for run("iptables", n.rule("-D", n.hostRule)...) == nil {
	}
	_ = run("ip", "link", "del", n.hostIf)
	_ = run("ip", "netns", "del", n.name)
}

func (n *netns) Host() string { return n.nsIP }

func (n *netns) Wrap(bin string, args []string) *exec.Cmd {
	// ip netns exec execs the command in place: the process is bin itself,
	// so signals to it reach the agent.
	return exec.Command("ip", append([]string{"netns", "exec", n.name, bin}, args...)...)
}

func (n *netns) ControlPlane() string { return "127.0.0.1:" + strconv.Itoa(n.cpPort) }

func (n *netns) cutRules() [][]string {
	p := strconv.Itoa(n.cpPort)
	return [][]string{
		{"OUTPUT", "-p", "tcp", "-d", n.hostIP, "--dport", p, "-j", "DROP"},
		{"INPUT", "-p", "tcp", "-s", n.hostIP, "--sport", p, "-j", "DROP"},
	}
}

func (n *netns) Cut() error {
	n.cutMu.Lock()
	defer n.cutMu.Unlock()
	if n.cut {
		return nil
	}
	for _, r := range n.cutRules() {
		if err := n.in(append([]string{"iptables", "-A"}, r...)...); err != nil {
			return err
		}
	}
	n.cut = true
	return nil
}

func (n *netns) Heal() error {
	n.cutMu.Lock()
	defer n.cutMu.Unlock()
	if !n.cut {
		return nil
	}
	var errs []error
	for _, r := range n.cutRules() {
		errs = append(errs, n.in(append([]string{"iptables", "-D"}, r...)...))
	}
	n.cut = false
	return errors.Join(errs...)
}

func (n *netns) Close() error {
	n.teardown()
	return n.lock.Close()
}

// relayNet is the fallback without namespaces: the agent runs on the host
// and reaches the control plane through a relay here, which holds every byte
// while cut (as a DROP would: nothing arrives, nothing is refused).
type relayNet struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	healed *sync.Cond
	conns  []net.Conn
}

func newRelayNet(cpAddr string) (*relayNet, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relayNet{ln: ln, target: cpAddr}
	r.healed = sync.NewCond(&r.mu)
	go r.serve()
	return r, nil
}

func (r *relayNet) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			r.waitHealed()
			u, err := net.Dial("tcp", r.target)
			if err != nil {
				_ = c.Close()
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, u)
			r.mu.Unlock()
			go r.pipe(u, c)
			r.pipe(c, u)
		}()
	}
}

func (r *relayNet) waitHealed() {
	r.mu.Lock()
	for r.cut {
		r.healed.Wait()
	}
	r.mu.Unlock()
}

// pipe copies src to dst, holding each chunk while the relay is cut.
func (r *relayNet) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			r.waitHealed()
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

func (r *relayNet) Host() string { return "127.0.0.1" }

func (r *relayNet) Wrap(bin string, args []string) *exec.Cmd { return exec.Command(bin, args...) }

func (r *relayNet) ControlPlane() string { return r.ln.Addr().String() }

func (r *relayNet) Cut() error {
	r.mu.Lock()
	r.cut = true
	r.mu.Unlock()
	return nil
}

func (r *relayNet) Heal() error {
	r.mu.Lock()
	r.cut = false
	r.healed.Broadcast()
	r.mu.Unlock()
	return nil
}

func (r *relayNet) Close() error {
	_ = r.Heal()
	err := r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	return err
}
