package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/rollout"
)

// refusingRollout refuses every wave, recording what it was asked.
type refusingRollout struct {
	mu    sync.Mutex
	req   rollout.WaveRequest
	actor string
}

var _ Rollout = (*refusingRollout)(nil)

func (*refusingRollout) Status() rollout.Status { return rollout.Status{Version: 7} }

func (r *refusingRollout) RunWave(_ context.Context, req rollout.WaveRequest, actor string) (rollout.WaveRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.req, r.actor = req, actor
	return rollout.WaveRun{}, fmt.Errorf("%w: the wave before it (w0) set conditions that do not hold yet", rollout.ErrWaveRefused)
}

// TestRolloutOverHTTP: GET /v1/rollout answers the rollout's status and
// POST /v1/rollout/waves runs a wave with the request's actor, in the
// JSON the CLI reads; a refused wave is 409 and keeps its sentinel across
// the wire; an API given no rollout answers its routes 404.
func TestRolloutOverHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cp := newControlPlane(t, idleReplication{})
	job, err := rollout.New(rollout.PlaneOf(cp), &rollout.Writers{})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(opts ...Opt) string {
		srv := httptest.NewServer(New(cp, opts...))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}

	url := serve(WithRollout(job))
	if code, body := get(url + "/v1/rollout"); code != http.StatusOK ||
		body != fmt.Sprintf(`{"version":%d,"namespaces":[],"topics":[],"waves":[],"unmet":[]}`, cp.Version()) {
		t.Errorf("GET /v1/rollout: %d %s", code, body)
	}
	cl := &Client{Base: url}
	req := rollout.WaveRequest{Wave: rollout.Wave{Name: "w1", Namespaces: []string{"a"},
		Until: rollout.WaveUntil{Complete: true, Soak: time.Minute}}}
	run, err := cl.RunWave(ctx, req, "alice")
	if err != nil || run.Name != "w1" || run.Actor != "alice" || run.Until != req.Until || len(run.Moved) != 0 {
		t.Errorf("RunWave: %+v, %v; want w1 run by alice, until kept, moving nothing", run, err)
	}
	st, err := cl.Rollout(ctx)
	if err != nil || len(st.Waves) != 1 || st.Waves[0].Name != "w1" || st.Waves[0].Until.Soak != time.Minute {
		t.Errorf("Rollout: %+v, %v; want wave w1 with its soak", st, err)
	}
	if _, err := cl.RunWave(ctx, rollout.WaveRequest{}, "alice"); !errors.Is(err, controlplane.ErrBadConfig) {
		t.Errorf("a wave of no namespace: %v, want ErrBadConfig", err)
	}

	refusing := &refusingRollout{}
	_, err = (&Client{Base: serve(WithRollout(refusing))}).RunWave(ctx, req, "bob")
	var ae *Error
	if !errors.Is(err, rollout.ErrWaveRefused) || !errors.As(err, &ae) || ae.Status != http.StatusConflict {
		t.Errorf("a refused wave: %v, want ErrWaveRefused, HTTP 409", err)
	}
	refusing.mu.Lock()
	if refusing.actor != "bob" || refusing.req.Name != "w1" || refusing.req.Until != req.Until {
		t.Errorf("the rollout was asked %+v by %q, want w1 by bob", refusing.req, refusing.actor)
	}
	refusing.mu.Unlock()

	if code, body := get(serve() + "/v1/rollout"); code != http.StatusNotFound || !strings.Contains(body, "no rollout") {
		t.Errorf("GET /v1/rollout with no rollout: %d %s, want 404", code, body)
	}
}
