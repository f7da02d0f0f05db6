package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/controlplane/acl"
	"github.com/baton-kafka/baton/controlplane/replication"
	"github.com/baton-kafka/baton/controlplane/rollout"
)

// An error answered by the API keeps its sentinel (controlplane's, or
// that of acl, replication or rollout beside it): the answer names, besides the
// message, the code of every sentinel the error wraps ({"error": "...",
// "codes": ["gate_refused"]}), and the client's Error unwraps to those
// sentinels, so that errors.Is(err, controlplane.ErrGateRefused) holds on
// both sides of the wire. The codes are stable: a client reads them from
// servers of other versions.

// sentinel is one sentinel the API answers: its code on the wire and the
// HTTP status it is answered with.
type sentinel struct {
	err    error
	code   string
	status int
}

// sentinels are in the order an error's status is chosen by: the first
// the error wraps gives it (500 when it wraps none of them).
var sentinels = []sentinel{
	{rollout.ErrWaveRefused, "wave_refused", http.StatusConflict},
	{controlplane.ErrUnknownTopic, "unknown_topic", http.StatusNotFound},
	{controlplane.ErrIllegalTransition, "illegal_transition", http.StatusConflict},
	{controlplane.ErrCutoverRunning, "cutover_running", http.StatusConflict},
	{controlplane.ErrGateRefused, "gate_refused", http.StatusConflict},
	{controlplane.ErrTopicExists, "topic_exists", http.StatusConflict},
	{controlplane.ErrNeedsForce, "needs_force", http.StatusConflict},
	{controlplane.ErrBadConfig, "bad_config", http.StatusBadRequest},
	{replication.ErrBadConfig, "replication_bad_config", http.StatusBadRequest},
	{controlplane.ErrClosed, "closed", http.StatusInternalServerError},
	{controlplane.ErrStoreUnavailable, "store_unavailable", http.StatusInternalServerError},
	{controlplane.ErrNotLeader, "not_leader", http.StatusInternalServerError},
	{controlplane.ErrVersionMoved, "version_moved", http.StatusInternalServerError},
	{controlplane.ErrDecided, "decided", http.StatusInternalServerError},
	{replication.ErrNotReady, "not_ready", http.StatusInternalServerError},
	{acl.ErrGuardPrincipal, "guard_principal", http.StatusInternalServerError},
	{acl.ErrGuard, "guard", http.StatusInternalServerError},
	{controlplane.ErrNoSourceFence, "no_source_fence", http.StatusInternalServerError},
	{acl.ErrFence, "source_fence", http.StatusInternalServerError},
	{controlplane.ErrTransactions, "transactions", http.StatusInternalServerError},
	{controlplane.ErrDataDirLocked, "data_dir_locked", http.StatusInternalServerError},
}

// Error is an error answered by the control plane. It unwraps to the
// sentinels the server's error wrapped (see Codes).
type Error struct {
	Status  int
	Message string
	// Codes name the sentinels the server's error wrapped; none for an
	// error of no sentinel, or an answer that is not the API's.
	Codes []string
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinels of e's codes, the unknown ones left out.
func (e *Error) Unwrap() []error {
	var errs []error
	for _, c := range e.Codes {
		for _, s := range sentinels {
			if s.code == c {
				errs = append(errs, s.err)
			}
		}
	}
	return errs
}

// errorBody is an error's answer.
type errorBody struct {
	Error string   `json:"error"`
	Codes []string `json:"codes,omitempty"`
}

// reply answers v, or err with the status and codes of its sentinels.
func reply(w http.ResponseWriter, v any, err error) {
	if err == nil {
		writeJSON(w, v)
		return
	}
	code := 0
	var codes []string
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			if code == 0 {
				code = s.status
			}
			codes = append(codes, s.code)
		}
	}
	if code == 0 {
		code = http.StatusInternalServerError
	}
	writeError(w, code, errorBody{Error: err.Error(), Codes: codes})
}

// replyStatus answers an error of no sentinel: {"error": msg} with code.
func replyStatus(w http.ResponseWriter, code int, msg string) {
	writeError(w, code, errorBody{Error: msg})
}

func writeError(w http.ResponseWriter, code int, body errorBody) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v); err != nil && !errors.Is(err, io.EOF) {
		reply(w, nil, fmt.Errorf("%w: request body: %v", controlplane.ErrBadConfig, err))
		return false
	}
	return true
}

// readError reads a non-200 answer's error; an answer that is not the
// API's (a proxy's, or net/http's "Client sent an HTTP request to an
// HTTPS server") is told by its status and first line of text.
func readError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var e errorBody
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		e = errorBody{Error: resp.Status}
		if line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n"); line != "" && len(line) <= 200 {
			e.Error += ": " + line
		}
	}
	return &Error{Status: resp.StatusCode, Message: e.Error, Codes: e.Codes}
}
