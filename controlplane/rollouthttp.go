package controlplane

import (
	"context"
	"errors"
	"net/http"
)

// handleRollout adds the rollout's routes to mux (Handler):
//
//	GET  /v1/rollout        per namespace its agents and the topics written from it,
//	                        per topic its writers, state and bypassing producer (Rollout)
//	POST /v1/rollout/waves  run a wave (a WaveRequest with "actor"): 409 while the
//	                        conditions of the wave before it do not hold
func (cp *ControlPlane) handleRollout(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/rollout", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, cp.Rollout()) })
	mux.HandleFunc("POST /v1/rollout/waves", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			WaveRequest
			Actor string `json:"actor"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		run, err := cp.RunWave(r.Context(), req.WaveRequest, actorOf(r, req.Actor))
		if errors.Is(err, ErrWaveRefused) {
			replyStatus(w, http.StatusConflict, err.Error())
			return
		}
		reply(w, run, err)
	})
}

// Rollout returns the rollout's state (GET /v1/rollout).
func (c *APIClient) Rollout(ctx context.Context) (Rollout, error) {
	var out Rollout
	return out, c.do(ctx, http.MethodGet, "/v1/rollout", nil, &out)
}

// RunWave runs a wave (POST /v1/rollout/waves).
func (c *APIClient) RunWave(ctx context.Context, req WaveRequest, actor string) (WaveRun, error) {
	var out WaveRun
	body := struct {
		WaveRequest
		Actor string `json:"actor"`
	}{req, actor}
	return out, c.do(ctx, http.MethodPost, "/v1/rollout/waves", body, &out)
}
