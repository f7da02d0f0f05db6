package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/migration"
)

// Handler serves the HTTP API the `baton` CLI speaks:
//
//	GET    /v1/topics                     every topic
//	POST   /v1/topics                     add (a TopicSpec)
//	GET    /v1/topics/{name}              one topic with its time lag
//	POST   /v1/topics/{name}/migrate      start a cutover   {"actor"}
//	POST   /v1/topics/{name}/abort        abort a cutover   {"actor","reason"}
//	POST   /v1/topics/{name}/state        REJECT <-> PROXY  {"actor","state"}
//	POST   /v1/topics/{name}/shadow       switch shadow features {"actor","latencyEmulation","authCheck","authEnforce"}
//	DELETE /v1/topics/{name}?actor=&force= stop managing (a COMPLETE topic only with force=true: RemoveTopic)
//	GET    /v1/agents                     agents: lease and xDS state
//	GET    /v1/workers                    replicator workers: partitions, lease, lag
//	GET    /v1/events?topic=&after=&follow=1   the audit log (NDJSON when following)
//	GET    /v1/findings?topic=&kind=      open findings agents report
//	GET    /v1/clusters, /v1/source-topics  for baton apply (planhttp.go)
//
// Errors are {"error": "..."} with 404 (unknown topic), 409 (illegal
// transition, cutover running, gate refused, topic exists, a removal
// refused without force) or 400; with
// APITokens or APIIdentities, 401 (no credentials, an unknown bearer
// token) and 403 (a certificate mapped to no role, a token and a
// certificate of two callers, a read-only caller's write). The actor of a
// write is the caller's name when credentials are required, else the one
// the request declares.
//
// The web console adds GET /v1/whoami and GET /v1/overview to the API, and
// serves its files at /console/ outside the credential check (console.go).
func (cp *ControlPlane) Handler() http.Handler {
	mux := http.NewServeMux()
	cp.consoleRoutes(mux)
	mux.HandleFunc("GET /v1/topics", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, cp.Topics()) })
	mux.HandleFunc("POST /v1/topics", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			TopicSpec
			Actor string `json:"actor"`
		}
		if !readJSON(w, r, &req) {
			return
		}
		t, err := cp.AddTopic(r.Context(), req.TopicSpec, actorOf(r, req.Actor))
		reply(w, t, err)
	})
	mux.HandleFunc("GET /v1/topics/{name}", func(w http.ResponseWriter, r *http.Request) {
		st, err := cp.Status(r.PathValue("name"))
		reply(w, st, err)
	})
	mux.HandleFunc("DELETE /v1/topics/{name}", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		force, err := parseForceParam(q.Get("force"))
		var t Topic
		if err == nil {
			t, err = cp.RemoveTopic(r.Context(), r.PathValue("name"), actorOf(r, q.Get("actor")), force)
		}
		reply(w, t, err)
	})
	mux.HandleFunc("POST /v1/topics/{name}/{op}", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Actor  string `json:"actor"`
			Reason string `json:"reason"`
			State  string `json:"state"`
			// Force lists the cutover gates a migrate is forced past
			// (gate names, or "all").
			Force []string `json:"force"`
			ShadowChange
		}
		if !readJSON(w, r, &req) {
			return
		}
		name, actor := r.PathValue("name"), actorOf(r, req.Actor)
		var t Topic
		var err error
		switch r.PathValue("op") {
		case "migrate":
			var force []Gate
			if force, err = ParseForce(req.Force); err == nil {
				t, err = cp.Migrate(r.Context(), name, actor, force...)
			}
		case "abort":
			t, err = cp.Abort(r.Context(), name, actor, req.Reason)
		case "shadow":
			t, err = cp.SetShadow(r.Context(), name, req.ShadowChange, actor)
		case "state":
			var s migration.State
			if s, err = migration.ParseState(req.State); err == nil {
				t, err = cp.SetState(r.Context(), name, s, actor)
			} else {
				err = fmt.Errorf("%w: state: %w", ErrBadConfig, err)
			}
		default:
			http.NotFound(w, r)
			return
		}
		reply(w, t, err)
	})
	mux.HandleFunc("GET /v1/agents", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, cp.Agents()) })
	mux.HandleFunc("GET /v1/workers", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, cp.Workers()) })
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		after, _ := strconv.ParseUint(q.Get("after"), 10, 64)
		if q.Get("follow") == "" {
			evs, err := cp.Events(r.Context(), q.Get("topic"), after)
			if evs == nil {
				evs = []Event{}
			}
			reply(w, evs, err)
			return
		}
		ch, err := cp.Follow(r.Context(), q.Get("topic"), after)
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
	})
	mux.HandleFunc("GET /v1/findings", func(w http.ResponseWriter, r *http.Request) {
		fs := cp.OpenFindings(r.URL.Query().Get("topic"), migration.FindingKind(r.URL.Query().Get("kind")), 0)
		if fs == nil {
			fs = []Finding{}
		}
		writeJSON(w, fs)
	})
	cp.handlePlanReads(mux) // planhttp.go
	cp.handleRollout(mux)   // rollouthttp.go
	if len(cp.cfg.apiTokens) > 0 || len(cp.cfg.apiIDs) > 0 {
		return withConsole((&apiAuth{tokens: cp.cfg.apiTokens, ids: cp.cfg.apiIDs, log: cp.log}).wrap(mux))
	}
	return withConsole(mux)
}

// parseForceParam reads a removal's force parameter: empty is false.
func parseForceParam(v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: force: %q is not true or false", ErrBadConfig, v)
	}
	return b, nil
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v); err != nil && !errors.Is(err, io.EOF) {
		reply(w, nil, fmt.Errorf("%w: request body: %v", ErrBadConfig, err))
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any, err error) {
	if err == nil {
		writeJSON(w, v)
		return
	}
	code := http.StatusBadRequest
	switch {
	case errors.Is(err, ErrUnknownTopic):
		code = http.StatusNotFound
	case errors.Is(err, ErrIllegalTransition), errors.Is(err, ErrCutoverRunning), errors.Is(err, ErrGateRefused),
		errors.Is(err, ErrTopicExists), errors.Is(err, ErrNeedsForce):
		code = http.StatusConflict
	case errors.Is(err, ErrBadConfig), errors.Is(err, replication.ErrBadConfig):
	default:
		code = http.StatusInternalServerError
	}
	replyStatus(w, code, err.Error())
}

// replyStatus answers an error: {"error": msg} with code.
func replyStatus(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// APIClient speaks the HTTP API (the CLI's side).
type APIClient struct {
	Base string // http://host:port or https://host:port
	// HTTP sends the requests (default http.DefaultClient); its
	// transport holds the TLS settings of an https:// Base.
	HTTP *http.Client
	// Token is sent as a bearer token when set (see APITokens).
	Token string
}

// APIError is an error answered by the control plane.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return e.Message }

// send sends req with the token, if any.
func (c *APIClient) send(req *http.Request) (*http.Response, error) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

func (c *APIClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Base, "/")+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return apiError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// apiError reads a non-200 answer's {"error": ...}; an answer that is not
// the API's (a proxy's, or net/http's "Client sent an HTTP request to an
// HTTPS server") is told by its status and first line of text.
func apiError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		e.Error = resp.Status
		if line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n"); line != "" && len(line) <= 200 {
			e.Error += ": " + line
		}
	}
	return &APIError{Status: resp.StatusCode, Message: e.Error}
}

// Topics lists topics.
func (c *APIClient) Topics(ctx context.Context) ([]Topic, error) {
	var out []Topic
	return out, c.do(ctx, http.MethodGet, "/v1/topics", nil, &out)
}

// Add adds a topic.
func (c *APIClient) Add(ctx context.Context, spec TopicSpec, actor string) (Topic, error) {
	var out Topic
	body := struct {
		TopicSpec
		Actor string `json:"actor"`
	}{spec, actor}
	return out, c.do(ctx, http.MethodPost, "/v1/topics", body, &out)
}

// Status returns a topic with its lag.
func (c *APIClient) Status(ctx context.Context, name string) (TopicStatus, error) {
	var out TopicStatus
	return out, c.do(ctx, http.MethodGet, "/v1/topics/"+url.PathEscape(name), nil, &out)
}

// Op runs abort or state on a topic, or migrate without forcing a gate.
func (c *APIClient) Op(ctx context.Context, name, op, actor, reason, state string) (Topic, error) {
	var out Topic
	return out, c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(name)+"/"+op,
		map[string]string{"actor": actor, "reason": reason, "state": state}, &out)
}

// SetState moves a topic to REJECT or PROXY (the state endpoint).
func (c *APIClient) SetState(ctx context.Context, name string, to migration.State, actor string) (Topic, error) {
	return c.Op(ctx, name, "state", actor, "", to.String())
}

// Remove stops managing a topic; a COMPLETE one only with force (see
// ControlPlane.RemoveTopic). The Topic answered is the one removed, its
// state migration.Unmanaged.
func (c *APIClient) Remove(ctx context.Context, name, actor string, force bool) (Topic, error) {
	var out Topic
	q := url.Values{"actor": {actor}}
	if force {
		q.Set("force", "true")
	}
	return out, c.do(ctx, http.MethodDelete, "/v1/topics/"+url.PathEscape(name)+"?"+q.Encode(), nil, &out)
}

// Migrate starts a cutover of name, forced past the gates listed in force
// (gate names, or "all"; none when empty).
func (c *APIClient) Migrate(ctx context.Context, name, actor string, force []string) (Topic, error) {
	var out Topic
	return out, c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(name)+"/migrate",
		map[string]any{"actor": actor, "force": force}, &out)
}

// Shadow switches a topic's shadow features.
func (c *APIClient) Shadow(ctx context.Context, name string, ch ShadowChange, actor string) (Topic, error) {
	var out Topic
	body := struct {
		ShadowChange
		Actor string `json:"actor"`
	}{ch, actor}
	return out, c.do(ctx, http.MethodPost, "/v1/topics/"+url.PathEscape(name)+"/shadow", body, &out)
}

// Agents lists agents.
func (c *APIClient) Agents(ctx context.Context) ([]AgentView, error) {
	var out []AgentView
	return out, c.do(ctx, http.MethodGet, "/v1/agents", nil, &out)
}

// Workers returns how the control plane replicates and its workers.
func (c *APIClient) Workers(ctx context.Context) (Workers, error) {
	var out Workers
	return out, c.do(ctx, http.MethodGet, "/v1/workers", nil, &out)
}

// Events returns the log, or with follow calls each until ctx ends.
func (c *APIClient) Events(ctx context.Context, topic string, follow bool, each func(Event) error) error {
	q := url.Values{}
	if topic != "" {
		q.Set("topic", topic)
	}
	if !follow {
		var out []Event
		if err := c.do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &out); err != nil {
			return err
		}
		for _, e := range out {
			if err := each(e); err != nil {
				return err
			}
		}
		return nil
	}
	q.Set("follow", "1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.Base, "/")+"/v1/events?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return apiError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return err
		}
		if err := each(e); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}
