package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/baton-kafka/baton/controlplane"
	"github.com/baton-kafka/baton/internal/access"
)

// Callers of the HTTP API (docs/controlplane.md, "API callers").
//
// With tokens or identities configured, every request must name its
// caller: with `Authorization: Bearer <token>` (Tokens), or with a
// verified TLS client certificate whose identity a rule maps to a caller
// (Identities). The control plane keeps only each token's SHA-256, so
// the file it reads holds no secret a reader could replay. A read-only
// caller may list topics, status, agents and events; an operator may also
// add, migrate, abort, change state and remove. What a caller does is
// recorded under its name: a declared actor is ignored.

// Roles of an API token.
const (
	RoleReadOnly = "read-only"
	RoleOperator = "operator"
)

// Token is one caller of the HTTP API.
type Token struct {
	// Name is recorded as the actor of what the caller does.
	Name string `yaml:"name"`
	// Role is RoleReadOnly or RoleOperator.
	Role string `yaml:"role"`
	// SHA256 is the hex SHA-256 of the token (`printf %s "$TOKEN" |
	// sha256sum`).
	SHA256 string `yaml:"sha256"`

	sum []byte
}

// Tokens requires a bearer token from tokens on every HTTP API request.
// Default none: without Tokens or Identities, anyone who reaches the API
// may do anything, recorded under the actor it declares. The tokens MUST
// be valid (ParseTokens).
func Tokens(tokens []Token) Opt {
	return optFunc(func(s *server) { s.tokens = tokens })
}

// LoadTokens reads an API token file: a YAML list of name, role and
// sha256.
func LoadTokens(path string) ([]Token, error) {
	return access.Load(path, "API tokens", controlplane.ErrBadConfig, ParseTokens)
}

// ParseTokens parses and validates an API token file's contents.
func ParseTokens(b []byte) ([]Token, error) {
	ts, err := access.Decode[Token](b, "API tokens", controlplane.ErrBadConfig)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("%w: API tokens: no tokens", controlplane.ErrBadConfig)
	}
	names := map[string]bool{}
	for i := range ts {
		t := &ts[i]
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("%w: API tokens[%d]: name is required", controlplane.ErrBadConfig, i)
		case names[t.Name]:
			return nil, fmt.Errorf("%w: API tokens[%d]: name %q is used twice", controlplane.ErrBadConfig, i, t.Name)
		}
		if err := checkRole(t.Role); err != nil {
			return nil, fmt.Errorf("%w: API tokens[%d] (%s): %w", controlplane.ErrBadConfig, i, t.Name, err)
		}
		sum, err := hex.DecodeString(t.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("%w: API tokens[%d] (%s): sha256: want 64 hex digits, the SHA-256 of the token", controlplane.ErrBadConfig, i, t.Name)
		}
		names[t.Name], t.sum = true, sum
	}
	return ts, nil
}

// checkRole refuses a role the API does not know.
func checkRole(role string) error {
	if role != RoleReadOnly && role != RoleOperator {
		return fmt.Errorf("role %q: want %s or %s", role, RoleReadOnly, RoleOperator)
	}
	return nil
}

// Identity maps verified TLS client certificates to a caller of the
// HTTP API.
type Identity struct {
	// Identity is one of a certificate's identities, as the agent
	// identity rules take them (a URI SAN such as a SPIFFE id, a DNS SAN,
	// the subject's common name), or a path.Match pattern of them when it
	// holds *, ? or [ ("spiffe://example.org/ns/ci/sa/*").
	Identity string `yaml:"identity"`
	// Name is recorded as the actor of what the caller does. A pattern
	// stands for many certificates, so the actor is then the name and
	// the identity it matched: "ci (spiffe://example.org/ns/ci/sa/deploy)".
	Name string `yaml:"name"`
	// Role is RoleReadOnly or RoleOperator.
	Role string `yaml:"role"`

	pattern bool
}

// Identities lets a request's verified TLS client certificate name its
// caller. Default none: certificates are not read. The server MUST
// verify client certificates (tls.Config.ClientCAs, with ClientAuth
// tls.VerifyClientCertIfGiven to take token-only callers as well, or
// tls.RequireAndVerifyClientCert). The identities MUST be valid
// (ParseIdentities).
func Identities(ids []Identity) Opt {
	return optFunc(func(s *server) { s.ids = ids })
}

// LoadIdentities reads an API identity file: a YAML list of identity,
// name and role.
func LoadIdentities(path string) ([]Identity, error) {
	return access.Load(path, "API identities", controlplane.ErrBadConfig, ParseIdentities)
}

// ParseIdentities parses and validates an API identity file's contents.
// Names may repeat (one caller may hold several certificates); identities
// may not, so that one rule alone says what an identity may do.
func ParseIdentities(b []byte) ([]Identity, error) {
	ids, err := access.Decode[Identity](b, "API identities", controlplane.ErrBadConfig)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: API identities: no identities", controlplane.ErrBadConfig)
	}
	seen := map[string]bool{}
	for i := range ids {
		id := &ids[i]
		switch {
		case id.Identity == "":
			return nil, fmt.Errorf("%w: API identities[%d]: identity is required", controlplane.ErrBadConfig, i)
		case seen[id.Identity]:
			return nil, fmt.Errorf("%w: API identities[%d]: identity %q is listed twice", controlplane.ErrBadConfig, i, id.Identity)
		case id.Name == "":
			return nil, fmt.Errorf("%w: API identities[%d] (%s): name is required", controlplane.ErrBadConfig, i, id.Identity)
		}
		if err := checkRole(id.Role); err != nil {
			return nil, fmt.Errorf("%w: API identities[%d] (%s): %w", controlplane.ErrBadConfig, i, id.Identity, err)
		}
		if id.pattern = strings.ContainsAny(id.Identity, `*?[\`); id.pattern {
			if _, err := path.Match(id.Identity, ""); err != nil {
				return nil, fmt.Errorf("%w: API identities[%d] (%s): pattern: %w", controlplane.ErrBadConfig, i, id.Identity, err)
			}
		}
		seen[id.Identity] = true
	}
	return ids, nil
}

// caller is who a request authenticated as.
type caller struct {
	name  string // of the token or the identity rule
	actor string // recorded in events
	role  string
}

// auth checks the credentials of every HTTP API request.
type auth struct {
	tokens []Token
	ids    []Identity
	log    *slog.Logger
	warned sync.Map // identities of refused certificates, logged once
}

type callerKey struct{}

// wrap wraps the API: a request without credentials, or with a token the
// API does not know, gets 401; a certificate mapped to no role, a token
// and a certificate naming two callers, or a read-only caller's write 403.
func (a *auth) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, code, msg := a.authenticate(r)
		if code == 0 && r.Method != http.MethodGet && r.Method != http.MethodHead && c.role != RoleOperator {
			code, msg = http.StatusForbidden, fmt.Sprintf("%s is %s: %s %s needs the %s role", c.actor, c.role, r.Method, r.URL.Path, RoleOperator)
		}
		if code != 0 {
			if code == http.StatusUnauthorized && len(a.tokens) > 0 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="baton"`)
			}
			replyStatus(w, code, msg)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c.actor)))
	})
}

// authenticate returns r's caller, or the status and message refusing it.
// Every credential r carries must hold: an unknown token is refused beside
// a mapped certificate too, and a token and a certificate must name the
// same caller, who then has the lesser of their roles. A certificate
// counts only with identities configured.
func (a *auth) authenticate(r *http.Request) (c caller, code int, msg string) {
	var byToken, byCert *caller
	if raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		if byToken = a.token(strings.TrimSpace(raw)); byToken == nil {
			if len(a.tokens) == 0 {
				return c, http.StatusUnauthorized, "this control plane takes no bearer tokens: drop --token-file and unset BATON_API_TOKEN"
			}
			return c, http.StatusUnauthorized, "unknown bearer token: check --token-file or BATON_API_TOKEN"
		}
	}
	if cert := access.VerifiedCert(r.TLS); cert != nil && len(a.ids) > 0 {
		ids := access.CertIdentities(cert)
		if byCert = a.identity(ids); byCert == nil {
			return c, http.StatusForbidden, a.unmapped(ids)
		}
	}
	switch {
	case byToken == nil && byCert == nil:
		return c, http.StatusUnauthorized, a.required()
	case byCert == nil:
		return *byToken, 0, ""
	case byToken == nil:
		return *byCert, 0, ""
	case byToken.name != byCert.name:
		return c, http.StatusForbidden, fmt.Sprintf("the bearer token is %s's and the client certificate %s's: send one of them", byToken.name, byCert.actor)
	}
	c = *byCert // its actor names the identity a pattern matched
	if byToken.role != RoleOperator {
		c.role = byToken.role
	}
	return c, 0, ""
}

// token returns the caller whose token raw is, nil if none.
func (a *auth) token(raw string) *caller {
	sum := sha256.Sum256([]byte(raw))
	var match *Token
	for i := range a.tokens {
		// Every entry is compared, so the time taken does not tell
		// which one matched.
		if subtle.ConstantTimeCompare(sum[:], a.tokens[i].sum) == 1 {
			match = &a.tokens[i]
		}
	}
	if match == nil {
		return nil
	}
	return &caller{name: match.Name, actor: match.Name, role: match.Role}
}

// identity returns the caller a certificate's identities map to, nil if
// none. An exact identity wins over a pattern, so that a rule for one
// certificate holds beside a pattern that covers it; between rules of a
// kind, the first in the file wins.
func (a *auth) identity(ids []string) *caller {
	for _, patterns := range []bool{false, true} {
		for _, rule := range a.ids {
			if rule.pattern != patterns {
				continue
			}
			for _, id := range ids {
				ok := rule.Identity == id
				if patterns {
					ok, _ = path.Match(rule.Identity, id)
				}
				if !ok {
					continue
				}
				c := &caller{name: rule.Name, actor: rule.Name, role: rule.Role}
				if patterns {
					c.actor = rule.Name + " (" + id + ")"
				}
				return c
			}
		}
	}
	return nil
}

// unmapped is the refusal of a certificate whose identities map to no
// role, logged at WARN once per certificate identity: the operator who
// forgot a rule reads it in the log, the caller in the answer.
func (a *auth) unmapped(ids []string) string {
	msg := "the client certificate carries no identity (URI SAN, DNS SAN or common name): no --api-identities rule can map it"
	if len(ids) > 0 {
		msg = fmt.Sprintf("the client certificate (%s) maps to no role: map its identity in --api-identities", strings.Join(ids, ", "))
	}
	if _, dup := a.warned.LoadOrStore(strings.Join(ids, ","), true); !dup && a.log != nil {
		a.log.Warn("HTTP API caller refused: " + msg)
	}
	return msg
}

// required says what credentials the API takes.
func (a *auth) required() string {
	switch {
	case len(a.ids) == 0:
		return "a bearer token is required: pass --token-file or set BATON_API_TOKEN"
	case len(a.tokens) == 0:
		return "a client certificate is required: pass --cert-file and --key-file"
	}
	return "a bearer token or a client certificate is required: pass --token-file or set BATON_API_TOKEN, or --cert-file and --key-file"
}

// actorOf is who acts in r: the caller's name when the API requires
// credentials, else the actor the request declares ("api" if none).
func actorOf(r *http.Request, declared string) string {
	if name, ok := r.Context().Value(callerKey{}).(string); ok {
		return name
	}
	if declared == "" {
		return "api"
	}
	return declared
}
