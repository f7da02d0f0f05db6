package sasl

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/xdg-go/scram"
	"go.yaml.in/yaml/v3"

	"github.com/baton-kafka/baton/filter"
)

// --- PLAIN (RFC 4616) ---

// PlainVerifier checks a PLAIN client's user and password.
type PlainVerifier func(ctx context.Context, user, password string) (Identity, error)

// Plain is the PLAIN mechanism: the client's one message carries its
// user and password, which verify checks. An authorization id other than
// the user is refused, as Kafka does.
func Plain(verify PlainVerifier) Mechanism { return plain{verify} }

type plain struct{ verify PlainVerifier }

func (plain) Name() string { return "PLAIN" }

func (p plain) Start(context.Context, filter.ConnInfo) Conversation { return plainConv(p) }

type plainConv plain

func (p plainConv) Step(ctx context.Context, msg []byte) ([]byte, bool, Identity, error) {
	fields := bytes.Split(msg, []byte{0})
	if len(fields) != 3 || len(fields[1]) == 0 {
		return nil, false, Identity{}, fmt.Errorf("%w: malformed PLAIN message", ErrRefused)
	}
	authz, user, pass := string(fields[0]), string(fields[1]), string(fields[2])
	if authz != "" && authz != user {
		return nil, false, Identity{}, fmt.Errorf("%w: authorization id %q is not the user %q", ErrRefused, authz, user)
	}
	id, err := p.verify(ctx, user, pass)
	if err != nil {
		return nil, false, Identity{}, err
	}
	return nil, true, id, nil
}

// --- OAUTHBEARER (RFC 7628) ---

// TokenVerifier checks an OAUTHBEARER client's bearer token.
type TokenVerifier func(ctx context.Context, token string) (Identity, error)

// OAuthBearer is the OAUTHBEARER mechanism: the client's first message
// carries its bearer token, which verify checks. SASL extensions are
// accepted and ignored.
func OAuthBearer(verify TokenVerifier) Mechanism { return oauthBearer{verify} }

type oauthBearer struct{ verify TokenVerifier }

func (oauthBearer) Name() string { return "OAUTHBEARER" }

func (o oauthBearer) Start(context.Context, filter.ConnInfo) Conversation { return oauthConv(o) }

type oauthConv oauthBearer

func (o oauthConv) Step(ctx context.Context, msg []byte) ([]byte, bool, Identity, error) {
	token, err := bearerToken(msg)
	if err != nil {
		return nil, false, Identity{}, err
	}
	id, err := o.verify(ctx, token)
	if err != nil {
		return nil, false, Identity{}, err
	}
	return nil, true, id, nil
}

// bearerToken reads the token of an OAUTHBEARER client's first message:
// a GS2 header ("n,," or "n,a=<authzid>,"), then key=value pairs each
// ended by 0x01, one of them auth=Bearer <token>, then a last 0x01.
func bearerToken(msg []byte) (string, error) {
	parts := strings.Split(string(msg), "\x01")
	if len(parts) < 3 || !strings.HasPrefix(parts[0], "n,") || parts[len(parts)-1] != "" || parts[len(parts)-2] != "" {
		return "", fmt.Errorf("%w: malformed OAUTHBEARER message", ErrRefused)
	}
	for _, kv := range parts[1 : len(parts)-2] {
		if v, ok := strings.CutPrefix(kv, "auth="); ok {
			scheme, token, ok := strings.Cut(v, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
				return "", fmt.Errorf("%w: OAUTHBEARER auth is not a bearer token", ErrRefused)
			}
			return token, nil
		}
	}
	return "", fmt.Errorf("%w: OAUTHBEARER message without a token", ErrRefused)
}

// --- SCRAM (RFC 5802, RFC 7677) ---

// SCRAM mechanisms.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
)

// SCRAM is SCRAM-SHA-256 or SCRAM-SHA-512 against creds: the client proves
// it knows its password without sending it, and the filter proves it
// knows the client's stored key. Its principal is User:<user>.
func SCRAM(name string, creds *SCRAMCredentials) (Mechanism, error) {
	hash, err := scramHash(name)
	if err != nil {
		return nil, err
	}
	srv, err := hash.NewServer(func(user string) (scram.StoredCredentials, error) {
		c, ok := creds.lookup(name, user)
		if !ok {
			return scram.StoredCredentials{}, fmt.Errorf("%w: unknown user", ErrRefused)
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadConfig, name, err)
	}
	return scramMech{name, srv}, nil
}

func scramHash(name string) (scram.HashGeneratorFcn, error) {
	switch name {
	case ScramSHA256:
		return scram.SHA256, nil
	case ScramSHA512:
		return scram.SHA512, nil
	}
	return nil, fmt.Errorf("%w: mechanism %q: want %s or %s", ErrBadConfig, name, ScramSHA256, ScramSHA512)
}

type scramMech struct {
	name string
	srv  *scram.Server
}

func (m scramMech) Name() string { return m.name }

func (m scramMech) Start(context.Context, filter.ConnInfo) Conversation {
	return &scramConv{m.srv.NewConversation()}
}

type scramConv struct{ c *scram.ServerConversation }

func (s *scramConv) Step(_ context.Context, msg []byte) ([]byte, bool, Identity, error) {
	reply, err := s.c.Step(string(msg))
	if err != nil {
		// The library's errors name what failed (an unknown user, a
		// wrong proof) without the credentials.
		if !errors.Is(err, ErrRefused) {
			err = fmt.Errorf("%w: %v", ErrRefused, err)
		}
		return nil, false, Identity{}, err
	}
	if !s.c.Done() {
		return []byte(reply), false, Identity{}, nil
	}
	if !s.c.Valid() {
		return nil, false, Identity{}, fmt.Errorf("%w: SCRAM proof not valid", ErrRefused)
	}
	return []byte(reply), true, Identity{Principal: "User:" + s.c.Username()}, nil
}

// SCRAMCredentials are the users a SCRAM mechanism accepts: what a broker
// stores for each (salt, iterations, stored key, server key), never the
// password. Loaded from a file, they are read again when the file changed
// (checked at each authentication), so users are added or their
// passwords rotated without a restart; a file that no longer parses keeps
// the users last read.
type SCRAMCredentials struct {
	path string

	mu  sync.Mutex
	raw []byte                                // what m was parsed from
	m   map[[2]string]scram.StoredCredentials // by mechanism and user
}

// SCRAMCredential is one entry of a credentials file.
type SCRAMCredential struct {
	User       string `yaml:"user"`
	Mechanism  string `yaml:"mechanism"`
	Salt       string `yaml:"salt"` // base64
	Iterations int    `yaml:"iterations"`
	StoredKey  string `yaml:"storedKey"` // base64
	ServerKey  string `yaml:"serverKey"` // base64
}

func (c *SCRAMCredentials) lookup(mech, user string) (scram.StoredCredentials, bool) {
	if c == nil {
		return scram.StoredCredentials{}, false
	}
	c.refresh()
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, ok := c.m[[2]string{mech, user}]
	return sc, ok
}

// refresh reads the file again if it changed.
func (c *SCRAMCredentials) refresh() {
	if c.path == "" {
		return
	}
	b, err := os.ReadFile(c.path)
	if err != nil {
		return
	}
	c.mu.Lock()
	same := bytes.Equal(b, c.raw)
	c.mu.Unlock()
	if same {
		return
	}
	fresh, err := ParseSCRAMCredentials(b)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.raw, c.m = b, fresh.m
}

// Has reports whether any user of mech is known.
func (c *SCRAMCredentials) Has(mech string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k[0] == mech {
			return true
		}
	}
	return false
}

// LoadSCRAMCredentials reads a credentials file: a YAML list of
// SCRAMCredential.
func LoadSCRAMCredentials(path string) (*SCRAMCredentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: SCRAM credentials: %w", ErrBadConfig, err)
	}
	c, err := ParseSCRAMCredentials(b)
	if err != nil {
		return nil, err
	}
	c.path, c.raw = path, b
	return c, nil
}

// ParseSCRAMCredentials parses a credentials file; errors name the entry
// and the field.
func ParseSCRAMCredentials(b []byte) (*SCRAMCredentials, error) {
	var list []SCRAMCredential
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("%w: SCRAM credentials: %w", ErrBadConfig, err)
	}
	out := &SCRAMCredentials{m: map[[2]string]scram.StoredCredentials{}}
	for i, e := range list {
		at := fmt.Sprintf("SCRAM credentials[%d]", i)
		if e.User == "" {
			return nil, fmt.Errorf("%w: %s.user: required", ErrBadConfig, at)
		}
		if _, err := scramHash(e.Mechanism); err != nil {
			return nil, fmt.Errorf("%w: %s.mechanism: %q: want %s or %s", ErrBadConfig, at, e.Mechanism, ScramSHA256, ScramSHA512)
		}
		if e.Iterations < 4096 {
			return nil, fmt.Errorf("%w: %s.iterations: %d is below 4096 (Kafka's minimum)", ErrBadConfig, at, e.Iterations)
		}
		var keys [3][]byte
		for j, f := range []struct{ name, v string }{{"salt", e.Salt}, {"storedKey", e.StoredKey}, {"serverKey", e.ServerKey}} {
			k, err := base64.StdEncoding.DecodeString(f.v)
			if err != nil || len(k) == 0 {
				return nil, fmt.Errorf("%w: %s.%s: not base64", ErrBadConfig, at, f.name)
			}
			keys[j] = k
		}
		k := [2]string{e.Mechanism, e.User}
		if _, dup := out.m[k]; dup {
			return nil, fmt.Errorf("%w: %s: %s %q listed twice", ErrBadConfig, at, e.Mechanism, e.User)
		}
		out.m[k] = scram.StoredCredentials{
			KeyFactors: scram.KeyFactors{Salt: string(keys[0]), Iters: e.Iterations},
			StoredKey:  keys[1], ServerKey: keys[2],
		}
	}
	return out, nil
}

// NewSCRAMCredential derives what a credentials file holds for user's
// password under mech, with a fresh random salt.
func NewSCRAMCredential(mech, user, password string, iterations int) (SCRAMCredential, error) {
	hash, err := scramHash(mech)
	if err != nil {
		return SCRAMCredential{}, err
	}
	salt := make([]byte, 24)
	if _, err := rand.Read(salt); err != nil {
		return SCRAMCredential{}, err
	}
	cl, err := hash.NewClient(user, password, "")
	if err != nil {
		return SCRAMCredential{}, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	sc, err := cl.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	if err != nil {
		return SCRAMCredential{}, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	return SCRAMCredential{User: user, Mechanism: mech, Iterations: iterations,
		Salt:      base64.StdEncoding.EncodeToString(salt),
		StoredKey: base64.StdEncoding.EncodeToString(sc.StoredKey),
		ServerKey: base64.StdEncoding.EncodeToString(sc.ServerKey)}, nil
}
