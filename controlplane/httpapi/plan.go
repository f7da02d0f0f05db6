package httpapi

import (
	"net/http"
)

// planReads adds the reads of `baton apply` to mux:
//
//	GET /v1/clusters       the source and destination: name, bootstrap
//	GET /v1/source-topics  the source cluster's topics (internal ones left out)
func (s *server) planReads(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/clusters", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.api.Clusters()) })
	mux.HandleFunc("GET /v1/source-topics", func(w http.ResponseWriter, r *http.Request) {
		ts, err := s.api.SourceTopics(r.Context())
		if ts == nil {
			ts = []string{}
		}
		reply(w, ts, err)
	})
}
