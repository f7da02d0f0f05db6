package httpapi

import (
	"context"
	"net/http"

	"github.com/baton-kafka/baton/controlplane/rollout"
)

// Rollout is what the rollout's routes call (a *rollout.Job).
type Rollout interface {
	Status() rollout.Status
	RunWave(ctx context.Context, req rollout.WaveRequest, actor string) (rollout.WaveRun, error)
}

var _ Rollout = (*rollout.Job)(nil)

// WithRollout serves r's rollout at /v1/rollout (default none: its routes
// answer 404).
func WithRollout(r Rollout) Opt { return optFunc(func(s *server) { s.rollout = r }) }

// rolloutRoutes adds the rollout's routes to mux (New):
//
//	GET  /v1/rollout        per namespace its agents and the topics written from it,
//	                        per topic its writers, state and bypassing producer (Status)
//	POST /v1/rollout/waves  run a wave (a WaveRequest with "actor"): 409 while the
//	                        conditions of the wave before it do not hold
func (s *server) rolloutRoutes(mux *http.ServeMux) {
	if s.rollout == nil {
		none := func(w http.ResponseWriter, r *http.Request) {
			replyStatus(w, http.StatusNotFound, "this control plane's API serves no rollout")
		}
		mux.HandleFunc("GET /v1/rollout", none)
		mux.HandleFunc("POST /v1/rollout/waves", none)
		return
	}
	mux.HandleFunc("GET /v1/rollout", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.rollout.Status()) })
	mux.HandleFunc("POST /v1/rollout/waves", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			rollout.WaveRequest
			Actor string `json:"actor"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		run, err := s.rollout.RunWave(r.Context(), req.WaveRequest, actorOf(r, req.Actor))
		reply(w, run, err) // ErrWaveRefused: 409 (errors.go)
	})
}
