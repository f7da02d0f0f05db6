package clients

// Helpers the drivers share: config checks, pacing, exactly-once ack
// bookkeeping, and running a client as a child process.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// codecs are the compression names ProduceConfig accepts, "" meaning none.
var codecs = map[string]bool{"": true, "none": true, "gzip": true, "snappy": true, "lz4": true, "zstd": true}

// checkProduceConfig rejects configs no driver can run.
func checkProduceConfig(cfg ProduceConfig) error {
	switch {
	case cfg.Bootstrap == "":
		return errors.New("clients: ProduceConfig.Bootstrap is empty")
	case cfg.Topic == "":
		return errors.New("clients: ProduceConfig.Topic is empty")
	case cfg.Records < 1:
		return fmt.Errorf("clients: ProduceConfig.Records must be at least 1, got %d", cfg.Records)
	case cfg.Rate < 0:
		return fmt.Errorf("clients: ProduceConfig.Rate must not be negative, got %d", cfg.Rate)
	case !codecs[cfg.Compression]:
		return fmt.Errorf("clients: unknown compression %q (want none, gzip, snappy, lz4 or zstd)", cfg.Compression)
	case cfg.PauseAt < 0 || cfg.PauseAt >= cfg.Records && cfg.PauseAt != 0:
		return fmt.Errorf("clients: ProduceConfig.PauseAt must be 0 or in [1, Records=%d), got %d", cfg.Records, cfg.PauseAt)
	case cfg.PauseAt > 0 && cfg.Resume == nil:
		return errors.New("clients: ProduceConfig.PauseAt is set but Resume is nil")
	case cfg.Transactional != nil && cfg.Transactional.ID == "":
		return errors.New("clients: ProduceConfig.Transactional.ID is empty")
	case cfg.Transactional != nil && (cfg.Transactional.PerTransaction < 0 || cfg.Transactional.AbortEvery < 0):
		return fmt.Errorf("clients: ProduceConfig.Transactional: PerTransaction %d and AbortEvery %d must not be negative",
			cfg.Transactional.PerTransaction, cfg.Transactional.AbortEvery)
	}
	return cfg.Security.check()
}

// noTransactions refuses a transactional cfg for a client whose driver has
// no transactional mode.
func noTransactions(client string, cfg ProduceConfig) error {
	if cfg.Transactional != nil {
		return fmt.Errorf("%w: %s: transactions (only the java driver has them)", ErrUnsupported, client)
	}
	return nil
}

// codecName is cfg.Compression with "" spelled "none".
func codecName(c string) string {
	if c == "" {
		return "none"
	}
	return c
}

// bootstrapList splits a comma-separated bootstrap list.
func bootstrapList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// pacer spaces records rate per second from a start time (no catch-up
// limit: a sender that fell behind sends at once until it is on time), and
// holds record pauseAt back until resume is closed; the records after it
// are paced from the resumption.
type pacer struct {
	start   time.Time
	rate    int
	pauseAt int
	resume  <-chan struct{}
}

func newPacer(cfg ProduceConfig) *pacer {
	return &pacer{start: time.Now(), rate: cfg.Rate, pauseAt: cfg.PauseAt, resume: cfg.Resume}
}

// wait blocks until record seq is due or ctx ends.
func (p *pacer) wait(ctx context.Context, seq int) error {
	if p.pauseAt > 0 && seq == p.pauseAt {
		select {
		case <-p.resume:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.start = time.Now().Add(-time.Duration(int64(seq) * int64(time.Second) / int64(max(p.rate, 1))))
	}
	if p.rate <= 0 {
		return ctx.Err()
	}
	due := p.start.Add(time.Duration(int64(seq) * int64(time.Second) / int64(p.rate)))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ackTracker passes acks to onAck from the one goroutine that owns it and
// remembers which records have an outcome, so a driver can fail the rest
// when it stops early. It passes duplicates and out-of-range sequence
// numbers through unchanged: hiding them would hide client bugs.
type ackTracker struct {
	prefix string
	onAck  func(Ack)
	seen   []bool
	left   int
}

func newAckTracker(cfg ProduceConfig, onAck func(Ack)) *ackTracker {
	return &ackTracker{prefix: cfg.KeyPrefix, onAck: onAck, seen: make([]bool, cfg.Records), left: cfg.Records}
}

func (t *ackTracker) report(a Ack) {
	if a.At.IsZero() {
		a.At = time.Now()
	}
	if a.Seq >= 0 && a.Seq < len(t.seen) && !t.seen[a.Seq] {
		t.seen[a.Seq] = true
		t.left--
	}
	t.onAck(a)
}

// complete says whether every record has an outcome.
func (t *ackTracker) complete() bool { return t.left == 0 }

// failRest reports every record without an outcome as failed with msg.
func (t *ackTracker) failRest(msg string) {
	for seq, ok := range t.seen {
		if !ok {
			t.report(Ack{Seq: seq, Key: Key(t.prefix, seq), Partition: -1, Offset: -1, Err: msg})
		}
	}
}

// missing is how many records have no outcome yet.
func (t *ackTracker) missing() int { return t.left }

// ackQueue hands acks from a client's callback goroutines to the driver's
// goroutine without ever blocking the callbacks, however many are pending
// and whether or not anyone still reads.
type ackQueue struct {
	mu      sync.Mutex
	pending []Ack
	ready   chan struct{} // holds a token while pending is non-empty
}

func newAckQueue() *ackQueue { return &ackQueue{ready: make(chan struct{}, 1)} }

func (q *ackQueue) push(a Ack) {
	q.mu.Lock()
	q.pending = append(q.pending, a)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take returns the pending acks, oldest first.
func (q *ackQueue) take() []Ack {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.pending
	q.pending = nil
	return out
}

// sourceDir is the directory of this package's source, where the scripts of
// the child-process drivers live.
func sourceDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok || file == "" {
		return "", errors.New("clients: cannot locate the package source directory")
	}
	return filepath.Dir(file), nil
}

// procLine is one line a child printed.
type procLine struct {
	stderr bool
	text   string
}

// childSpec says how to run a client as a child process.
type childSpec struct {
	client string // short client name, for errors
	path   string
	args   []string
	dir    string
	env    []string // added to os.Environ()
	// feed, when set, writes the child's stdin; it is closed when feed
	// returns. Without feed stdin is empty.
	feed func(ctx context.Context, w io.Writer) error
	// handle sees every line of stdout and stderr, in order per stream, on
	// the goroutine that called runChild. It returns whether it consumed
	// the line; stderr lines it did not consume make up the stderr tail.
	handle func(l procLine) bool
}

// childResult is how a child ended.
type childResult struct {
	waitErr error  // from cmd.Wait: nil when it exited 0
	exit    int    // exit code, -1 when killed or unknown
	killed  bool   // ctx ended and the driver killed the process group
	tail    string // last stderr lines the handler did not consume
	feedErr error  // from feed, when it failed for a reason other than ctx
}

const stderrTailLines = 30

// runChild starts spec in its own process group, feeds it, hands every
// output line to spec.handle, and waits for it to exit. When ctx ends it
// kills the whole process group. Errors starting the binary that mean it is
// not installed wrap ErrUnavailable.
func runChild(ctx context.Context, spec childSpec) (childResult, error) {
	cmd := exec.Command(spec.path, spec.args...)
	cmd.Dir = spec.dir
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return childResult{}, fmt.Errorf("clients: %s: %w", spec.client, err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return childResult{}, fmt.Errorf("clients: %s: %w", spec.client, err)
	}
	var stdin io.WriteCloser
	if spec.feed != nil {
		if stdin, err = cmd.StdinPipe(); err != nil {
			return childResult{}, fmt.Errorf("clients: %s: %w", spec.client, err)
		}
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return childResult{}, fmt.Errorf("%w: %s: cannot run %s: %v", ErrUnavailable, spec.client, spec.path, err)
		}
		return childResult{}, fmt.Errorf("clients: %s: starting %s: %w", spec.client, spec.path, err)
	}
	pgid := cmd.Process.Pid

	lines := make(chan procLine, 256)
	var readers sync.WaitGroup
	read := func(r io.Reader, isErr bool) {
		defer readers.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		for sc.Scan() {
			lines <- procLine{stderr: isErr, text: sc.Text()}
		}
		if err := sc.Err(); err != nil {
			lines <- procLine{stderr: true, text: fmt.Sprintf("(driver: reading %s output: %v)", spec.client, err)}
			// Drain so the child never blocks on a full pipe.
			_, _ = io.Copy(io.Discard, r)
		}
	}
	readers.Add(2)
	go read(stdout, false)
	go read(stderr, true)
	go func() { readers.Wait(); close(lines) }()

	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	feedDone := make(chan error, 1)
	if spec.feed != nil {
		go func() {
			err := spec.feed(feedCtx, stdin)
			_ = stdin.Close()
			feedDone <- err
		}()
	} else {
		feedDone <- nil
	}

	var res childResult
	var tail []string
	done := ctx.Done()
	for open := true; open; {
		select {
		case l, ok := <-lines:
			if !ok {
				open = false
				break
			}
			if !spec.handle(l) && l.stderr {
				tail = append(tail, l.text)
				if len(tail) > stderrTailLines {
					tail = tail[len(tail)-stderrTailLines:]
				}
			}
		case <-done:
			done = nil
			res.killed = true
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	res.waitErr = cmd.Wait()
	// A process group member that outlived the leader (none of our scripts
	// fork, but be safe) goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	res.exit = -1
	if cmd.ProcessState != nil {
		res.exit = cmd.ProcessState.ExitCode()
	}
	stopFeed()
	if err := <-feedDone; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, os.ErrClosed) {
		res.feedErr = err
	}
	res.tail = strings.Join(tail, "\n")
	return res, nil
}

// describe renders how a child ended, for errors.
func (r childResult) describe() string {
	var b strings.Builder
	if r.waitErr != nil {
		b.WriteString(r.waitErr.Error())
	} else {
		b.WriteString("exited 0")
	}
	if r.feedErr != nil {
		fmt.Fprintf(&b, "; writing its stdin: %v", r.feedErr)
	}
	if r.tail != "" {
		b.WriteString("; stderr tail:\n")
		b.WriteString(r.tail)
	} else {
		b.WriteString("; no stderr")
	}
	return b.String()
}

// scriptConfig is the JSON the script drivers (kafkajs, python) take as
// their one argument.
type scriptConfig struct {
	Client      string `json:"client"`
	Bootstrap   string `json:"bootstrap"`
	Topic       string `json:"topic"`
	Records     int    `json:"records"`
	Rate        int    `json:"rate"`
	Idempotent  bool   `json:"idempotent"`
	Compression string `json:"compression"`
	Headers     bool   `json:"headers"`
	KeyPrefix   string `json:"keyPrefix"`
	// PauseAt and ResumeFile: the script sends records [0, pauseAt), then
	// waits (serving its client's callbacks) until resumeFile exists.
	PauseAt    int    `json:"pauseAt,omitempty"`
	ResumeFile string `json:"resumeFile,omitempty"`
	// Security is ProduceConfig.Security; absent for plaintext without
	// authentication.
	Security *scriptSecurity `json:"security,omitempty"`
}

// scriptSecurity is a Security as the script drivers read it.
type scriptSecurity struct {
	// Protocol is Security.Protocol (PLAINTEXT, SSL, SASL_PLAINTEXT or
	// SASL_SSL).
	Protocol string `json:"protocol"`
	CAFile   string `json:"caFile,omitempty"`
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
	// Mechanism is the SASL mechanism, "" without SASL.
	Mechanism string `json:"mechanism,omitempty"`
	User      string `json:"user,omitempty"`
	Password  string `json:"password,omitempty"`
	// Token, Principal and ExpiresMs are OAUTHBEARER's token and what
	// tokenClaims reads of it, for clients that want them with it.
	Token     string `json:"token,omitempty"`
	Principal string `json:"principal,omitempty"`
	ExpiresMs int64  `json:"expiresMs,omitempty"`
}

// newScriptSecurity is sec for a script driver, nil for the zero value.
func newScriptSecurity(sec Security) *scriptSecurity {
	if sec.TLS == nil && sec.SASL == nil {
		return nil
	}
	s := &scriptSecurity{Protocol: sec.Protocol()}
	if t := sec.TLS; t != nil {
		s.CAFile, s.CertFile, s.KeyFile = t.CAFile, t.CertFile, t.KeyFile
	}
	if a := sec.SASL; a != nil {
		s.Mechanism, s.User, s.Password, s.Token = a.Mechanism, a.User, a.Password, a.Token
		if a.Mechanism == MechOAuthBearer {
			principal, exp := tokenClaims(a.Token)
			s.Principal, s.ExpiresMs = principal, exp.UnixMilli()
		}
	}
	return s
}

// resumeFile is how a child-process driver learns that a paused run
// (cfg.PauseAt) may go on: a file that appears once cfg.Resume is closed.
// It returns "" when cfg does not pause. stop removes the file's directory
// and MUST be called when the run ends.
func resumeFile(ctx context.Context, cfg ProduceConfig) (path string, stop func(), err error) {
	if cfg.PauseAt <= 0 {
		return "", func() {}, nil
	}
	dir, err := os.MkdirTemp("", "baton-resume-*")
	if err != nil {
		return "", nil, fmt.Errorf("clients: a directory for the resume file: %w", err)
	}
	path = filepath.Join(dir, "resume")
	ctx, cancel := context.WithCancel(ctx)
	written := make(chan struct{})
	go func() {
		defer close(written)
		select {
		case <-cfg.Resume:
			_ = os.WriteFile(path, nil, 0o644) // empty: existing is the signal
		case <-ctx.Done():
		}
	}()
	return path, func() {
		cancel()
		<-written
		_ = os.RemoveAll(dir)
	}, nil
}

// scriptAck is one line a script driver prints on stdout per record.
type scriptAck struct {
	Seq       *int   `json:"seq"`
	Key       string `json:"key"`
	Partition *int32 `json:"partition"`
	Offset    *int64 `json:"offset"`
	Error     string `json:"error"`
}

// exitMissingDependency is the exit code of a script driver whose package
// is not installed.
const exitMissingDependency = 3

// scriptRun is one script driver run.
type scriptRun struct {
	client  string
	path    string // interpreter
	args    []string
	dir     string
	env     []string
	install string // what to run when the package is missing
}

// produceWithScript runs a script that prints one scriptAck JSON line per
// record on stdout and passes them to onAck.
func produceWithScript(ctx context.Context, r scriptRun, cfg ProduceConfig, onAck func(Ack)) error {
	t := newAckTracker(cfg, onAck)
	var bad []string
	res, err := runChild(ctx, childSpec{
		client: r.client,
		path:   r.path,
		args:   r.args,
		dir:    r.dir,
		env:    r.env,
		handle: func(l procLine) bool {
			if l.stderr {
				return false
			}
			a, err := parseScriptAck(l.text)
			if err != nil {
				if len(bad) < 5 {
					bad = append(bad, fmt.Sprintf("%v: %q", err, l.text))
				}
				return true
			}
			t.report(a)
			return true
		},
	})
	if err != nil {
		return err
	}
	switch {
	case res.killed:
		t.failRest(fmt.Sprintf("%s driver stopped before the client reported this record: %v", r.client, ctx.Err()))
		return fmt.Errorf("clients: %s: %w", r.client, ctx.Err())
	case res.exit == exitMissingDependency:
		t.failRest(fmt.Sprintf("%s is not installed", r.client))
		return fmt.Errorf("%w: %s: %s (%s)", ErrUnavailable, r.client, r.install, res.describe())
	case len(bad) > 0:
		t.failRest(fmt.Sprintf("%s driver printed lines it could not parse", r.client))
		return fmt.Errorf("clients: %s printed %d+ unparseable ack lines, first: %s (%s)", r.client, len(bad), strings.Join(bad, "; "), res.describe())
	case res.waitErr != nil:
		n := t.missing()
		t.failRest(fmt.Sprintf("%s exited before reporting this record: %v", r.client, res.waitErr))
		return fmt.Errorf("clients: %s failed with %d records unreported: %s", r.client, n, res.describe())
	case !t.complete():
		n := t.missing()
		t.failRest(fmt.Sprintf("%s exited without reporting this record", r.client))
		return fmt.Errorf("clients: %s exited without reporting %d of %d records (%s)", r.client, n, cfg.Records, res.describe())
	}
	return nil
}

func parseScriptAck(line string) (Ack, error) {
	var s scriptAck
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Ack{}, fmt.Errorf("not an ack line (%v)", err)
	}
	if s.Seq == nil {
		return Ack{}, errors.New("ack line without seq")
	}
	a := Ack{Seq: *s.Seq, Key: s.Key, Partition: -1, Offset: -1, Err: s.Error, At: time.Now()}
	if s.Error == "" && (s.Partition == nil || s.Offset == nil) {
		return Ack{}, errors.New("successful ack line without partition and offset")
	}
	if s.Partition != nil {
		a.Partition = *s.Partition
	}
	if s.Offset != nil {
		a.Offset = *s.Offset
	}
	return a, nil
}
