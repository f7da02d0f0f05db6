package httpapi

import (
	"net/http"

	"github.com/baton-kafka/baton/controlplane"
)

// rolloutRoutes adds the rollout's routes to mux (New):
//
//	GET  /v1/rollout        per namespace its agents and the topics written from it,
//	                        per topic its writers, state and bypassing producer (Rollout)
//	POST /v1/rollout/waves  run a wave (a WaveRequest with "actor"): 409 while the
//	                        conditions of the wave before it do not hold
func (s *server) rolloutRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/rollout", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.api.Rollout()) })
	mux.HandleFunc("POST /v1/rollout/waves", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			controlplane.WaveRequest
			Actor string `json:"actor"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		run, err := s.api.RunWave(r.Context(), req.WaveRequest, actorOf(r, req.Actor))
		reply(w, run, err) // ErrWaveRefused: 409 (errors.go)
	})
}
