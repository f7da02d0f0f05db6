package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
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

// consoleRoutes registers the console's read endpoints on the API's mux,
// behind the API's credential check like every other route.
func (s *server) consoleRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/whoami", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.whoami(r)) })
	mux.HandleFunc("GET /v1/overview", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.api.Overview()) })
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
func (s *server) whoami(r *http.Request) Caller {
	if !s.credentials() {
		return Caller{Role: RoleOperator}
	}
	c, _, _ := (&auth{tokens: s.tokens, ids: s.ids}).authenticate(r)
	return Caller{Name: c.actor, Role: c.role, Credentials: true}
}
