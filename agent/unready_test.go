package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/embedded"
	"github.com/baton-kafka/baton/internal/wait"
)

// logRecorder keeps every log record's level and message.
type logRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Level.String()+" "+r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// count is how many records at level have a message containing s.
func (l *logRecorder) count(level slog.Level, s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if strings.HasPrefix(r, level.String()+" ") && strings.Contains(r, s) {
			n++
		}
	}
	return n
}

// matching returns the records at level whose message contains s.
func (l *logRecorder) matching(level slog.Level, s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if strings.HasPrefix(r, level.String()+" ") && strings.Contains(r, s) {
			out = append(out, r)
		}
	}
	return out
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestUnreachableSourceAtStart: until the agent has reached the source
// once, connections to it are refused (what clients take as a broker that
// is down, and retry) and /healthz answers 503; the source being down is
// logged once at WARN however long it lasts. Once the source is up the
// agent serves, and says so once at INFO.
func TestUnreachableSourceAtStart(t *testing.T) {
	t.Parallel()
	srcPort := freePort(t)
	srcAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(srcPort))
	dst, err := embedded.Start(embedded.Brokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	logs := &logRecorder{}
	a, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Admin("127.0.0.1:0"),
		agent.Source(srcAddr), agent.Destination(dst.Addrs()...), agent.Logger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	})

	const retrying = "source cluster not answering ApiVersions yet"
	wait.For(t, time.Minute, "the agent to retry the source a few times", func() string {
		if n := logs.count(slog.LevelDebug, retrying); n < 4 {
			return fmt.Sprintf("%d retries", n)
		}
		return ""
	})
	if _, err := net.Dial("tcp", a.Addr()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dialing the agent before it reached the source: %v, want connection refused", err)
	}
	resp, err := http.Get("http://" + a.AdminAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/healthz before the source answered: %s, want 503", resp.Status)
	}
	if n := logs.count(slog.LevelWarn, "source cluster unreachable"); n != 1 {
		t.Errorf("%d WARN records about the unreachable source, want 1", n)
	}

	src, err := embedded.Start(embedded.Brokers(1), embedded.FirstPort(srcPort))
	if err != nil {
		t.Fatalf("starting the source on port %d: %v", srcPort, err)
	}
	t.Cleanup(src.Close)
	select {
	case <-a.Ready():
	case <-time.After(time.Minute):
		t.Fatal("the agent did not serve within a minute of the source coming up")
	}
	cl := newClient(t, a.Addr())
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(t.Context(), cl); err != nil {
		t.Fatalf("metadata through the agent once the source is up: %v", err)
	}
	if n := logs.count(slog.LevelInfo, "source cluster reachable again"); n != 1 {
		t.Errorf("%d INFO records about the source coming back, want 1", n)
	}
	if n := logs.count(slog.LevelWarn, "source cluster unreachable"); n != 1 {
		t.Errorf("%d WARN records about the unreachable source in all, want 1", n)
	}
}
