package controlplane

import (
	"embed"
	"io/fs"
	"net/http"
	"time"

	"github.com/baton-kafka/baton/migration"
)

// The web console (docs/kubernetes.md, "Watch"): static HTML, CSS and
// JavaScript served at /console/, and two read endpoints of the API that
// only it needs so far. The static files are public, served beside the
// API rather than through it: they hold no data, and a browser cannot send
// a bearer token when it loads a page. Every call the page makes goes to
// the API with the token the operator typed, and is checked there like
// any other.

//go:embed console
var consoleFiles embed.FS

// consoleCSP lets the page load only its own files and talk only to the
// API it came from: no inline script, nothing from elsewhere, and no
// framing (the migrate and abort buttons must not be clickable through
// another site's page).
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Caller is who an API request authenticated as (GET /v1/whoami).
type Caller struct {
	// Name is recorded as the actor of what the caller does; empty when
	// the API takes no credentials.
	Name string `json:"name,omitempty"`
	// Role is RoleReadOnly or RoleOperator; RoleOperator when the API
	// takes no credentials (anyone who reaches it may do anything).
	Role string `json:"role"`
	// Credentials says whether the API requires them.
	Credentials bool `json:"credentials"`
}

// Overview is what the console polls besides topics and agents (GET
// /v1/overview): the config version agents should have acked, and each
// topic's time lag and copy progress.
type Overview struct {
	// Version is the current config version (TopicRoutes); an agent whose
	// acked version is lower has not applied the latest change yet.
	Version uint64 `json:"version"`
	// At is when the numbers were read, on the control plane's clock: the
	// console divides the change in Copied between two reads by the
	// change in At for a copy rate.
	At     time.Time       `json:"at"`
	Topics []TopicProgress `json:"topics"`
}

// TopicProgress is one topic's replication as the control plane knows it.
type TopicProgress struct {
	Topic string          `json:"topic"`
	State migration.State `json:"state"`
	// Lag is the time lag (nanoseconds), LagError why it is not known.
	// Neither is set for a COMPLETE topic: nothing copies it any more.
	Lag      time.Duration `json:"lag,omitempty"`
	LagError string        `json:"lagError,omitempty"`
	// Copied is the sum over the topic's partitions of the first source
	// offset not copied yet; absent until every partition has resumed
	// copying, and for a COMPLETE topic.
	Copied *int64 `json:"copied,omitempty"`
}

// consoleRoutes registers the console's read endpoints on the API's mux,
// behind the API's credential check like every other route.
func (cp *ControlPlane) consoleRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/whoami", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, cp.whoami(r)) })
	mux.HandleFunc("GET /v1/overview", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, cp.Overview()) })
}

// withConsole serves the console's files at /console/ and everything else
// with api.
func withConsole(api http.Handler) http.Handler {
	files, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	static := http.StripPrefix("/console/", http.FileServerFS(files))
	mux := http.NewServeMux()
	mux.Handle("/", api)
	mux.HandleFunc("GET /console/", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		static.ServeHTTP(w, r)
	})
	mux.Handle("GET /console", http.RedirectHandler("/console/", http.StatusMovedPermanently))
	return mux
}

// whoami is r's caller. The API's wrapper already refused a request
// without valid credentials; this reads the role it does not pass on.
func (cp *ControlPlane) whoami(r *http.Request) Caller {
	if len(cp.cfg.apiTokens) == 0 && len(cp.cfg.apiIDs) == 0 {
		return Caller{Role: RoleOperator}
	}
	c, _, _ := (&apiAuth{tokens: cp.cfg.apiTokens, ids: cp.cfg.apiIDs}).authenticate(r)
	return Caller{Name: c.actor, Role: c.role, Credentials: true}
}

// Overview returns the config version and every topic's replication.
func (cp *ControlPlane) Overview() Overview {
	topics := cp.Topics()
	o := Overview{Version: cp.Version(), At: cp.now(), Topics: make([]TopicProgress, 0, len(topics))}
	for _, t := range topics {
		p := TopicProgress{Topic: t.Name, State: t.State}
		if t.State != migration.Complete {
			var err error
			if p.Lag, err = cp.cfg.repl.Lag(t.Name); err != nil {
				p.LagError = err.Error()
			}
			if parts, err := cp.cfg.repl.Progress(t.Name); err == nil && len(parts) > 0 {
				var sum int64
				known := true
				for _, next := range parts {
					known = known && next >= 0
					sum += next
				}
				if known {
					p.Copied = &sum
				}
			}
		}
		o.Topics = append(o.Topics, p)
	}
	return o
}
