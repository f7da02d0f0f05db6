package controlplane

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// Callers of the HTTP API (docs/controlplane.md, "API tokens").
//
// With tokens configured, every request carries `Authorization: Bearer
// <token>`. The control plane keeps only each token's SHA-256, so the file
// it reads holds no secret a reader could replay. A read-only caller may
// list topics, status, agents and events; an operator may also add,
// migrate, abort, change state and remove. What a caller does is recorded
// under its token's name: a declared actor is ignored.

// Roles of an API token.
const (
	RoleReadOnly = "read-only"
	RoleOperator = "operator"
)

// APIToken is one caller of the HTTP API.
type APIToken struct {
	// Name is recorded as the actor of what the caller does.
	Name string `yaml:"name"`
	// Role is RoleReadOnly or RoleOperator.
	Role string `yaml:"role"`
	// SHA256 is the hex SHA-256 of the token (`printf %s "$TOKEN" |
	// sha256sum`).
	SHA256 string `yaml:"sha256"`

	sum []byte
}

// APITokens requires a bearer token from tokens on every HTTP API request,
// overriding none (anyone who reaches the API may do anything, recorded
// under the actor it declares). The tokens MUST be valid (ParseAPITokens).
func APITokens(tokens []APIToken) Opt {
	return optFunc(func(c *config) { c.apiTokens = tokens })
}

// LoadAPITokens reads an API token file: a YAML list of name, role and
// sha256.
func LoadAPITokens(path string) ([]APIToken, error) {
	return loadList(path, "API tokens", ParseAPITokens)
}

// ParseAPITokens parses and validates an API token file's contents.
func ParseAPITokens(b []byte) ([]APIToken, error) {
	ts, err := decodeList[APIToken](b, "API tokens")
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("%w: API tokens: no tokens", ErrBadConfig)
	}
	names := map[string]bool{}
	for i := range ts {
		t := &ts[i]
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("%w: API tokens[%d]: name is required", ErrBadConfig, i)
		case names[t.Name]:
			return nil, fmt.Errorf("%w: API tokens[%d]: name %q is used twice", ErrBadConfig, i, t.Name)
		case t.Role != RoleReadOnly && t.Role != RoleOperator:
			return nil, fmt.Errorf("%w: API tokens[%d] (%s): role %q: want %s or %s", ErrBadConfig, i, t.Name, t.Role, RoleReadOnly, RoleOperator)
		}
		sum, err := hex.DecodeString(t.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("%w: API tokens[%d] (%s): sha256: want 64 hex digits, the SHA-256 of the token", ErrBadConfig, i, t.Name)
		}
		names[t.Name], t.sum = true, sum
	}
	return ts, nil
}

type callerKey struct{}

// requireToken wraps the API: a request without a known token gets 401, a
// read-only caller's write 403.
func requireToken(tokens []APIToken, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var caller *APIToken
		if ok {
			sum := sha256.Sum256([]byte(strings.TrimSpace(raw)))
			for i := range tokens {
				// Every entry is compared, so the time taken does not
				// tell which one matched.
				if subtle.ConstantTimeCompare(sum[:], tokens[i].sum) == 1 {
					caller = &tokens[i]
				}
			}
		}
		if caller == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="baton"`)
			replyStatus(w, http.StatusUnauthorized, "a bearer token is required: pass --token-file or set BATON_API_TOKEN")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && caller.Role != RoleOperator {
			replyStatus(w, http.StatusForbidden, fmt.Sprintf("%s is %s: %s %s needs the %s role", caller.Name, caller.Role, r.Method, r.URL.Path, RoleOperator))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, caller.Name)))
	})
}

// actorOf is who acts in r: the token's name when the API requires tokens,
// else the actor the request declares ("api" if none).
func actorOf(r *http.Request, declared string) string {
	if name, ok := r.Context().Value(callerKey{}).(string); ok {
		return name
	}
	if declared == "" {
		return "api"
	}
	return declared
}
