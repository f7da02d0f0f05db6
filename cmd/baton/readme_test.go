package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
)

// byHandMarker is the line before README.md's "Try it by hand" block.
const byHandMarker = "<!-- by-hand:"

// byHandStep is what TestReadmeByHand expects of one command of the block,
// in the block's order.
type byHandStep struct {
	// prefix is how the command starts (the test fails when the README
	// and this table part ways).
	prefix string
	// up, for a background command (one ending in &), is what its output
	// says once it is up; the next command waits for it.
	up *regexp.Regexp
	// until, for a foreground one, is what its output must show, else it
	// is run again (as a reader does, told so by the README's comment).
	until *regexp.Regexp
	// want is what its output (each run's, the last one's for until)
	// must show.
	want []*regexp.Regexp
}

var pattern = regexp.MustCompile

// failed is how a baton command that failed says so (main's error line).
var failed = pattern(`(?m)^baton: `)

var byHandSteps = []byHandStep{
	{prefix: "go build -o bin/baton ./cmd/baton"},
	{prefix: "dir=$(mktemp -d)"},
	{prefix: "bin/baton dev cluster --brokers 3 --port 19092 &", up: pattern(`bootstrap: 127\.0\.0\.1:19092,127\.0\.0\.1:19093,127\.0\.0\.1:19094\n`)},
	{prefix: "bin/baton dev cluster --brokers 3 --port 19192 &", up: pattern(`bootstrap: 127\.0\.0\.1:19192,127\.0\.0\.1:19193,127\.0\.0\.1:19194\n`)},
	{prefix: "bin/baton controlplane ", up: pattern(`msg="control plane up"`)},
	{prefix: "bin/baton agent ", up: pattern(`msg="routes applied"`)},
	{prefix: "seq 1 500 | sed 's/^/k:/' | kcat -b 127.0.0.1:9092 -P -t orders -K:"},
	{prefix: "bin/baton topic add orders", want: []*regexp.Regexp{pattern(`orders +PROXY +1 `)}},
	{prefix: "bin/baton topic shadow orders ", want: []*regexp.Regexp{pattern(`orders +PROXY +2 `)}},
	{prefix: "bin/baton agents", want: []*regexp.Regexp{pattern(`pod-a +2 +valid `)}},
	{prefix: "bin/baton topic status orders", until: pattern(`time lag:  [0-9]`), want: []*regexp.Regexp{pattern(`state: +PROXY `)}},
	{prefix: "bin/baton topic migrate orders", want: []*regexp.Regexp{pattern(`orders +(MIGRATING|COMPLETE) `)}},
	{prefix: "bin/baton events --topic orders", until: pattern(` orders +completed +MIGRATING->COMPLETE attempt=1 `),
		want: []*regexp.Regexp{pattern(` initiated +PROXY->MIGRATING`), pattern(` drained `), pattern(` lag_zero `)}},
	{prefix: "bin/baton verify parity ", want: []*regexp.Regexp{pattern(`orders: 500 records in 6 partitions, no mismatch`)}},
	{prefix: "kill $(jobs -p)"},
}

// readmeByHand returns the commands of README.md's "Try it by hand" block:
// its lines after the marker's fence, a trailing \ joining a line to the
// next, comment-only lines dropped.
func readmeByHand(readme string) ([]string, error) {
	_, after, ok := strings.Cut(readme, "\n"+byHandMarker)
	if !ok {
		return nil, fmt.Errorf("README.md has no line starting %q", byHandMarker)
	}
	_, body, ok := strings.Cut(after, "\n```sh\n")
	if !ok {
		return nil, fmt.Errorf("no ```sh block after %q", byHandMarker)
	}
	body, _, ok = strings.Cut(body, "\n```\n")
	if !ok {
		return nil, fmt.Errorf("the block after %q does not end", byHandMarker)
	}
	var cmds []string
	var cont strings.Builder
	for line := range strings.SplitSeq(body, "\n") {
		if t := strings.TrimSpace(line); cont.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont.WriteString(strings.TrimSuffix(line, "\\"))
			continue
		}
		cont.WriteString(line)
		cmds = append(cmds, cont.String())
		cont.Reset()
	}
	if cont.Len() > 0 {
		return nil, fmt.Errorf("the block's last line continues: %q", cont.String())
	}
	return cmds, nil
}

// background reports whether a command runs in the background: it ends
// in & (before its comment).
func background(cmd string) bool {
	code, _, _ := strings.Cut(cmd, " #")
	return strings.HasSuffix(strings.TrimSpace(code), "&")
}

func TestReadmeByHandBlock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, readme string
		want         []string
		err          string
	}{
		{name: "commands", readme: "x\n" + byHandMarker + " -->\n```sh\ngo build . # c\n  # more\na \\\n  b &\n\n```\n",
			want: []string{"go build . # c", "a   b &"}},
		{name: "no marker", readme: "```sh\nls\n```\n", err: "no line"},
		{name: "no block", readme: "\n" + byHandMarker + " -->\nls\n", err: "no ```sh block"},
		{name: "unended", readme: "\n" + byHandMarker + " -->\n```sh\nls\n", err: "does not end"},
		{name: "continued last", readme: "\n" + byHandMarker + " -->\n```sh\nls \\\n```\n", err: "continues"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := readmeByHand(tc.readme)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("readmeByHand = %q, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("readmeByHand = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for cmd, want := range map[string]bool{"a &": true, "a &   # b": true, "a # b &": false, "a && b": false, "a": false} {
		if got := background(cmd); got != want {
			t.Errorf("background(%q) = %v, want %v", cmd, got, want)
		}
	}
}

// TestReadmeByHand runs README.md's "Try it by hand" commands as written,
// one at a time, in one bash from the repository's root, as a reader
// would: the & ones in the background, each next command once the last one
// is done (a background one: once its output says it is up); a command the
// README says to run again until it shows something is run again until it
// does. It ends at a completed migration with exact parity, and checks what
// each step printed, the control plane's one WARN of an unguarded
// destination, and that `kill $(jobs -p)` stops everything.
//
// The README's ports are fixed: the shell runs in a network namespace of
// its own where unshare(1) may make one (else on this machine's loopback),
// with TMPDIR a test directory (the block's mktemp -d). `go build` writes
// bin/baton, the repository's build output, as the README says.
func TestReadmeByHand(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds bin/baton and runs two dev clusters, a control plane and an agent")
	}
	for _, bin := range []string{"bash", "go", "kcat", "seq", "sed", "mktemp"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("the README's commands need %s: %v", bin, err)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := readmeByHand(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		if i >= len(byHandSteps) || !strings.HasPrefix(c, byHandSteps[i].prefix) ||
			background(c) != (byHandSteps[i].up != nil) {
			t.Fatalf("README.md's by-hand command %d is %q; byHandSteps expects %d commands, this one %+v: "+
				"update the table with the README", i+1, c, len(byHandSteps), byHandSteps[min(i, len(byHandSteps)-1)])
		}
	}
	if len(cmds) != len(byHandSteps) {
		t.Fatalf("README.md's by-hand block has %d commands, byHandSteps %d: update the table with the README", len(cmds), len(byHandSteps))
	}

	sh := startByHandShell(t, root)
	for i, c := range cmds {
		step := byHandSteps[i]
		timeout := time.Minute
		if i == 0 {
			timeout = 10 * time.Minute // a cold build cache compiles everything
		}
		if step.up != nil {
			from := len(sh.out.String())
			if code := sh.run(t, c, timeout); code != 0 {
				t.Fatalf("%s: status %d:\n%s", c, code, sh.out)
			}
			wait.For(t, timeout, c+" to be up", func() string {
				out := sh.out.String()[from:]
				if step.up.MatchString(out) {
					return ""
				}
				if failed.MatchString(out) {
					t.Fatalf("%s failed; the shell's output:\n%s", c, sh.out)
				}
				return fmt.Sprintf("no %q in its output yet; the shell's output:\n%s", step.up, sh.out)
			})
			continue
		}
		wait.For(t, timeout, c, func() string {
			from := len(sh.out.String())
			code := sh.run(t, c, timeout)
			out := sh.out.String()[from:]
			if code != 0 {
				t.Fatalf("%s: status %d; the shell's output:\n%s", c, code, sh.out)
			}
			if step.until != nil && !step.until.MatchString(out) {
				return fmt.Sprintf("no %q in its output:\n%s", step.until, out)
			}
			for _, w := range step.want {
				if !w.MatchString(out) {
					t.Fatalf("%s printed no %q; the shell's output:\n%s", c, w, sh.out)
				}
			}
			return ""
		})
	}
	// What `kill $(jobs -p)` stopped, stops: both clusters say so.
	if code := sh.run(t, "wait", time.Minute); code == -1 {
		t.Fatalf("the background commands did not stop; the shell's output:\n%s", sh.out)
	}
	out := sh.out.String()
	if n := len(pattern(`(?m)^stopping$`).FindAllString(out, -1)); n != 2 {
		t.Errorf("%d dev clusters said stopping, want 2; the shell's output:\n%s", n, out)
	}
	unguarded := pattern(`level=WARN msg="the destination write guard protects nothing: the replicator reaches the destination ` +
		`without SASL or a TLS client certificate, as User:ANONYMOUS[^"]*not write-protected against them[^"]*` +
		`authenticated listener \(SASL or mTLS\)[^"]*--replicator-principal`)
	if n := strings.Count(out, "the destination write guard protects nothing"); n != 1 || !unguarded.MatchString(out) {
		t.Errorf("the control plane warned %d times that the write guard protects nothing, want once, that the destination "+
			"is not write-protected against other anonymous clients and what to do; the shell's output:\n%s", n, out)
	}
	for _, bad := range []string{"no --state-dir", "level=ERROR"} {
		if strings.Contains(out, bad) {
			t.Errorf("the shell's output has %q:\n%s", bad, out)
		}
	}
}

// byHandShell is a bash that reads commands from the test, one at a time.
type byHandShell struct {
	in    io.WriteCloser
	out   *testlog.Buffer // its and its commands' stdout and stderr, as a terminal shows them
	codes chan int        // each command's exit status, as its sentinel line says
	done  chan struct{}   // the shell exited
	nonce string
}

// startByHandShell starts bash in dir, in a network namespace of its own
// when unshare(1) can make one. Its commands read no stdin (it is
// /dev/null); bash reads them from fd 3. It is killed, with every process
// of its group, when the test ends.
func startByHandShell(t *testing.T, dir string) *byHandShell {
	t.Helper()
	argv := []string{"bash", "/dev/fd/3"}
	if ns, why := netnsArgs(); ns != nil {
		argv = append(ns, "bash", "-c", `"$0" link set lo up && exec bash /dev/fd/3`, netnsIP)
	} else {
		t.Logf("running on this machine's loopback (the README's ports must be free): %s", why)
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	sh := &byHandShell{in: cmdW, out: &testlog.Buffer{}, codes: make(chan int, 1), done: make(chan struct{}),
		nonce: "byhand-" + hex.EncodeToString(b)}
	// Every process of the shell's writes to outW: the reader ends once
	// the last one is gone.
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	cmd.Stdout, cmd.Stderr = outW, outW
	cmd.ExtraFiles = []*os.File{cmdR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_, _ = cmdR.Close(), outW.Close()
	go func() { _ = cmd.Wait(); close(sh.done) }()
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if code, ok := strings.CutPrefix(line, sh.nonce+" "); ok {
				n, _ := strconv.Atoi(code)
				sh.codes <- n
				continue
			}
			_, _ = sh.out.Write([]byte(line + "\n"))
		}
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmdW.Close()
		<-sh.done
		select { // every process gone before TMPDIR is removed
		case <-gone:
		case <-time.After(time.Minute):
			t.Errorf("a process of the shell's still holds its output a minute after SIGKILL")
		}
		_ = outR.Close()
	})
	return sh
}

// run gives the shell cmd, then a line printing its exit status after the
// nonce, and returns that status: -1 when the shell exited or cmd took
// longer than timeout.
func (sh *byHandShell) run(t *testing.T, cmd string, timeout time.Duration) int {
	t.Helper()
	if _, err := fmt.Fprintf(sh.in, "%s\necho %s $?\n", cmd, sh.nonce); err != nil {
		t.Fatalf("giving the shell %q: %v", cmd, err)
	}
	select {
	case code := <-sh.codes:
		return code
	case <-sh.done:
		return -1
	case <-time.After(timeout):
		return -1
	}
}

// netnsIP is ip(8), which brings the new namespace's loopback up.
var netnsIP = func() string {
	for _, p := range []string{"ip", "/usr/sbin/ip", "/sbin/ip"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	return ""
}()

// netnsArgs returns the unshare(1) command that runs a command in a new
// network namespace (and user namespace, unless root), or nil and why not.
func netnsArgs() ([]string, string) {
	if netnsIP == "" {
		return nil, "no ip(8) to bring a network namespace's loopback up"
	}
	var tried []string
	for _, args := range [][]string{{"unshare", "--net", "--"}, {"unshare", "--net", "--map-root-user", "--"}} {
		out, err := exec.Command(args[0], append(args[1:], netnsIP, "link", "set", "lo", "up")...).CombinedOutput()
		if err == nil {
			return args, ""
		}
		tried = append(tried, fmt.Sprintf("%s: %v %s", strings.Join(args, " "), err, strings.TrimSpace(string(out))))
	}
	return nil, strings.Join(tried, "; ")
}
