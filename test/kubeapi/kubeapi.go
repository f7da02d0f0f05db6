// Package kubeapi stands in, for tests, for the one call of the
// Kubernetes API that Baton makes: a JSON merge patch of a pod's labels
// (PATCH /api/v1/namespaces/{ns}/pods/{name}). It checks the request as
// the API server would (bearer token, content type, body) and keeps each
// pod's labels, and it writes a service account directory (token, ca.crt,
// namespace) pointing at itself.
package kubeapi

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Server is the stand-in API server.
type Server struct {
	srv   *httptest.Server
	token string

	mu     sync.Mutex
	labels map[string]map[string]string // "ns/name" -> labels
	forbid bool
	// unavailable is how many patches more answer 503.
	unavailable int
	// history is every label a patch set, in the order applied.
	history []Change
}

// Change is one label a patch set on pod Namespace/Name (Value "" and
// Deleted for a key the patch removed).
type Change struct {
	Namespace, Name, Key, Value string
	Deleted                     bool
}

// History returns every label change applied so far, oldest first.
func (s *Server) History() []Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.history)
}

// Start starts a server that accepts token until the test ends.
func Start(t testing.TB, token string) *Server {
	t.Helper()
	s := &Server{token: token, labels: map[string]map[string]string{}}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// Host and Port are KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT.
func (s *Server) Host() string {
	h, _, _ := strings.Cut(strings.TrimPrefix(s.srv.URL, "https://"), ":")
	return h
}
func (s *Server) Port() string {
	_, p, _ := strings.Cut(strings.TrimPrefix(s.srv.URL, "https://"), ":")
	return p
}

// Forbid makes every patch answer 403, as a missing RBAC rule does.
func (s *Server) Forbid(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forbid = on
}

// Unavailable makes the next n patches answer 503, as an API server
// being upgraded or overloaded does.
func (s *Server) Unavailable(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unavailable = n
}

// Labels returns pod ns/name's labels.
func (s *Server) Labels(ns, name string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.labels[ns+"/"+name])
}

// ServiceAccountDir writes a service account directory for namespace ns
// (the token, the server's CA, the namespace) under dir and returns it.
func (s *Server) ServiceAccountDir(t testing.TB, dir, ns string) string {
	t.Helper()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	for name, b := range map[string][]byte{"token": []byte(s.token + "\n"), "ca.crt": ca, "namespace": []byte(ns)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
		"reason": reason, "message": msg, "code": code})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) != 6 || parts[0] != "api" || parts[1] != "v1" || parts[2] != "namespaces" || parts[4] != "pods" {
		status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	ns, name := parts[3], parts[5]
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		status(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	if r.Method != http.MethodPatch {
		status(w, http.StatusMethodNotAllowed, "MethodNotAllowed", r.Method+" is not served here")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/merge-patch+json" {
		status(w, http.StatusUnsupportedMediaType, "UnsupportedMediaType", fmt.Sprintf("the body of the request was in an unknown format: %s", ct))
		return
	}
	var patch struct {
		Metadata struct {
			Labels map[string]*string `json:"labels"`
		} `json:"metadata"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields() // this stand-in knows labels only
	if err := dec.Decode(&patch); err != nil {
		status(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unavailable > 0 {
		s.unavailable--
		status(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the server is currently unable to handle the request")
		return
	}
	if s.forbid {
		status(w, http.StatusForbidden, "Forbidden", fmt.Sprintf(`pods %q is forbidden: User "system:serviceaccount:%s:baton" cannot patch resource "pods" in API group "" in the namespace %q`, name, ns, ns))
		return
	}
	l := s.labels[ns+"/"+name]
	if l == nil {
		l = map[string]string{}
		s.labels[ns+"/"+name] = l
	}
	for k, v := range patch.Metadata.Labels {
		if v == nil {
			delete(l, k)
			s.history = append(s.history, Change{Namespace: ns, Name: name, Key: k, Deleted: true})
		} else {
			l[k] = *v
			s.history = append(s.history, Change{Namespace: ns, Name: name, Key: k, Value: *v})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": l}})
}
