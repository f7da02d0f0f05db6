package controlplane

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
)

// A write straight to D.T while T is in PROXY (no guard: a plaintext
// destination) diverges D.T.p: the partition shows in status, and
// migrate, through the HTTP API the CLI speaks, refuses naming it.
func TestDivergedDestinationRefusesCutover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kfake clusters and embedded etcd")
	}
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skipf("kcat is not installed (the foreign writer): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := startKafka(t, ctx)
	p := startPlane(t, ctx, t.TempDir(), "", k)
	srv := httptest.NewServer(newTestAPI(t, p.cp, ""))
	t.Cleanup(srv.Close)
	a := startAgent(t, ctx, p.addr, "a")

	prod, err := kgo.NewClient(kgo.SeedBrokers(k.src.Addrs()...), kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	produce := func(n int) {
		t.Helper()
		for range n {
			if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "div", Partition: 0, Value: []byte("s")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(30)
	if _, err := p.cp.AddTopic(ctx, TopicSpec{Name: "div"}, "test"); err != nil {
		t.Fatal(err)
	}
	waitLeases(t, ctx, p, a)
	wait.For(t, 30*time.Second, "replication caught up", func() string {
		if l, err := k.repl.Lag("div"); err != nil || l != 0 {
			return "not caught up"
		}
		if prog, err := k.repl.Progress("div"); err != nil || prog[0] != 30 {
			return "partition 0 not at 30"
		}
		return ""
	})

	// The bypassing producer: kcat straight to the destination.
	cmd := exec.CommandContext(ctx, "kcat", "-P", "-b", k.dst.Bootstrap(), "-t", "div", "-p", "0")
	cmd.Stdin = strings.NewReader("bypass\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat: %v: %s", err, out)
	}
	produce(30) // the replicator's next batch lands one past where it expects

	wait.For(t, 30*time.Second, "status shows partition 0 diverged", func() string {
		st, err := p.cp.Status("div")
		if err != nil {
			return err.Error()
		}
		if st.Diverged[0] == "" {
			return "not diverged yet"
		}
		return ""
	})
	resp, err := http.Post(srv.URL+"/v1/topics/div/migrate", "application/json", strings.NewReader(`{"actor":"test"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "div partition 0") {
		t.Fatalf("migrate of a diverged topic over HTTP: %d %s, want 409 naming div partition 0", resp.StatusCode, body)
	}
	if _, err := p.cp.Migrate(ctx, "div", "test"); !errors.Is(err, ErrGateRefused) {
		t.Errorf("Migrate: %v, want ErrGateRefused", err)
	}
	if top, _ := p.cp.Topic("div"); top.State != migration.Proxy {
		t.Errorf("state %s after a refused migrate", top.State)
	}
	wantEvents(t, ctx, p, "div", EventGateRefused)
}
