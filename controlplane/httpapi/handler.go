// Package httpapi owns the control plane's HTTP API: the handler the
// `baton` CLI, `baton apply` and the web console speak to (New), its
// callers' credentials (API tokens and TLS client certificate identities,
// with their roles), the console's static files, and the API's Go client
// (Client). It serves a controlplane.ControlPlane through the API
// interface and keeps no state of its own besides the credentials: what
// it answers is the control plane's. Errors keep their controlplane
// sentinel across the wire (errors.go).
package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/shadow"
	"github.com/baton-kafka/baton/migration"
)

// API is what the handler calls on the control plane.
type API interface {
	Topics() []controlplane.Topic
	AddTopic(ctx context.Context, spec controlplane.TopicSpec, actor string) (controlplane.Topic, error)
	Status(name string) (controlplane.TopicStatus, error)
	RemoveTopic(ctx context.Context, name, actor string, force bool) (controlplane.Topic, error)
	Migrate(ctx context.Context, name, actor string, force ...controlplane.Gate) (controlplane.Topic, error)
	Abort(ctx context.Context, name, actor, reason string) (controlplane.Topic, error)
	SetShadow(ctx context.Context, name string, ch controlplane.ShadowChange, actor string) (controlplane.Topic, error)
	SetState(ctx context.Context, name string, to migration.State, actor string) (controlplane.Topic, error)
	Agents() []controlplane.AgentView
	Workers() controlplane.Workers
	Events(ctx context.Context, topic string, after uint64) ([]controlplane.Event, error)
	Follow(ctx context.Context, topic string, after uint64) (<-chan controlplane.Event, error)
	// Shadow is the PROXY phase's watch, for the agents' open findings.
	Shadow() *shadow.Job
	Clusters() controlplane.ClustersView
	SourceTopics(ctx context.Context) ([]string, error)
	Overview() controlplane.Overview
}

var _ API = (*controlplane.ControlPlane)(nil)

// Opt configures New.
type Opt interface{ apply(*server) }

type optFunc func(*server)

func (f optFunc) apply(s *server) { f(s) }

// Logger sets the logger of refused callers (a certificate mapped to no
// role, once per identity; default slog.Default()). Its records carry
// component=controlplane, as the control plane's own do: the API is its.
func Logger(l *slog.Logger) Opt { return optFunc(func(s *server) { s.log = l }) }

// server is the handler's state: the control plane, its rollout and the
// credentials.
type server struct {
	api     API
	rollout Rollout
	tokens  []Token
	ids     []Identity
	log     *slog.Logger
}

// New returns the handler of the HTTP API the `baton` CLI speaks, serving
// api:
//
//	GET    /v1/topics                     every topic
//	POST   /v1/topics                     add (a TopicSpec)
//	GET    /v1/topics/{name}              one topic with its time lag
//	POST   /v1/topics/{name}/migrate      start a cutover   {"actor"}
//	POST   /v1/topics/{name}/abort        abort a cutover   {"actor","reason"}
//	POST   /v1/topics/{name}/state        REJECT <-> PROXY  {"actor","state"}
//	POST   /v1/topics/{name}/shadow       switch shadow features {"actor","latencyEmulation","authCheck","authEnforce","headroom"}
//	DELETE /v1/topics/{name}?actor=&force= stop managing (a COMPLETE topic only with force=true: RemoveTopic)
//	GET    /v1/agents                     agents: lease and xDS state
//	GET    /v1/workers                    replicator workers: partitions, lease, lag
//	GET    /v1/events?topic=&after=&follow=1   the audit log (NDJSON when following)
//	GET    /v1/findings?topic=&kind=      open findings agents report
//	GET    /v1/clusters, /v1/source-topics  for baton apply (plan.go)
//	GET    /v1/rollout, POST /v1/rollout/waves  the rollout, if WithRollout (rollout.go)
//
// Errors are {"error": "...", "codes": [...]} with 404 (unknown topic),
// 409 (illegal transition, cutover running, gate refused, topic exists, a
// removal refused without force, a wave refused) or 400 (errors.go); with
// Tokens or Identities, 401 (no credentials, an unknown bearer token) and
// 403 (a certificate mapped to no role, a token and a certificate of two
// callers, a read-only caller's write). The actor of a write is the
// caller's name when credentials are required, else the one the request
// declares.
//
// The web console adds GET /v1/whoami and GET /v1/overview to the API, and
// serves its files at /console/ outside the credential check (console.go).
func New(api API, opts ...Opt) http.Handler {
	s := &server{api: api, log: slog.Default()}
	for _, o := range opts {
		o.apply(s)
	}
	s.log = s.log.With("component", "controlplane")
	mux := http.NewServeMux()
	s.consoleRoutes(mux)
	s.topicRoutes(mux)
	mux.HandleFunc("GET /v1/agents", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.api.Agents()) })
	mux.HandleFunc("GET /v1/workers", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.api.Workers()) })
	mux.HandleFunc("GET /v1/events", s.events)
	mux.HandleFunc("GET /v1/findings", func(w http.ResponseWriter, r *http.Request) {
		fs := s.api.Shadow().OpenFindings(r.URL.Query().Get("topic"), migration.FindingKind(r.URL.Query().Get("kind")), 0)
		if fs == nil {
			fs = []shadow.Finding{}
		}
		writeJSON(w, fs)
	})
	s.planReads(mux)     // plan.go
	s.rolloutRoutes(mux) // rollout.go
	if s.credentials() {
		return withConsole((&auth{tokens: s.tokens, ids: s.ids, log: s.log}).wrap(mux))
	}
	return withConsole(mux)
}

// credentials says whether the API requires them.
func (s *server) credentials() bool { return len(s.tokens) > 0 || len(s.ids) > 0 }

// topicRoutes adds the routes of /v1/topics to mux.
func (s *server) topicRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/topics", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.api.Topics()) })
	mux.HandleFunc("POST /v1/topics", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			controlplane.TopicSpec
			Actor string `json:"actor"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		t, err := s.api.AddTopic(r.Context(), req.TopicSpec, actorOf(r, req.Actor))
		reply(w, t, err)
	})
	mux.HandleFunc("GET /v1/topics/{name}", func(w http.ResponseWriter, r *http.Request) {
		st, err := s.api.Status(r.PathValue("name"))
		reply(w, st, err)
	})
	mux.HandleFunc("DELETE /v1/topics/{name}", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		force, err := parseForceParam(q.Get("force"))
		var t controlplane.Topic
		if err == nil {
			t, err = s.api.RemoveTopic(r.Context(), r.PathValue("name"), actorOf(r, q.Get("actor")), force)
		}
		reply(w, t, err)
	})
	mux.HandleFunc("POST /v1/topics/{name}/{op}", s.topicOp)
}

// topicOp runs POST /v1/topics/{name}/{op}: migrate, abort, shadow, state.
func (s *server) topicOp(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Actor  string `json:"actor"`
		Reason string `json:"reason"`
		State  string `json:"state"`
		// Force lists the cutover gates a migrate is forced past
		// (gate names, or "all").
		Force []string `json:"force"`
		controlplane.ShadowChange
	}
	if !readJSON(w, r, &req) {
		return
	}
	name, actor := r.PathValue("name"), actorOf(r, req.Actor)
	var t controlplane.Topic
	var err error
	switch r.PathValue("op") {
	case "migrate":
		var force []controlplane.Gate
		if force, err = controlplane.ParseForce(req.Force); err == nil {
			t, err = s.api.Migrate(r.Context(), name, actor, force...)
		}
	case "abort":
		t, err = s.api.Abort(r.Context(), name, actor, req.Reason)
	case "shadow":
		t, err = s.api.SetShadow(r.Context(), name, req.ShadowChange, actor)
	case "state":
		var st migration.State
		if st, err = migration.ParseState(req.State); err == nil {
			t, err = s.api.SetState(r.Context(), name, st, actor)
		} else {
			err = fmt.Errorf("%w: state: %w", controlplane.ErrBadConfig, err)
		}
	default:
		http.NotFound(w, r)
		return
	}
	reply(w, t, err)
}

// events runs GET /v1/events: the log, or with follow=1 its events as
// NDJSON as they are written, until the request ends.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after, _ := strconv.ParseUint(q.Get("after"), 10, 64)
	if q.Get("follow") == "" {
		evs, err := s.api.Events(r.Context(), q.Get("topic"), after)
		if evs == nil {
			evs = []controlplane.Event{}
		}
		reply(w, evs, err)
		return
	}
	ch, err := s.api.Follow(r.Context(), q.Get("topic"), after)
	if err != nil {
		reply(w, nil, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	if fl != nil {
		fl.Flush()
	}
	for e := range ch {
		if enc.Encode(e) != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
}

// parseForceParam reads a removal's force parameter: empty is false.
func parseForceParam(v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: force: %q is not true or false", controlplane.ErrBadConfig, v)
	}
	return b, nil
}
