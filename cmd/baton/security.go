package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/keypair"
	"github.com/baton-kafka/baton/internal/oauthbearer"
)

// securityFlags are one cluster's TLS and SASL flags:
//
//   - --<side>-tls turns TLS on (default off); --<side>-tls-ca names a PEM
//     CA bundle to verify the brokers with (default: the system's), and
//     --<side>-tls-cert and --<side>-tls-key a client certificate (mTLS),
//     --<side>-tls-server-name the name the brokers' certificates carry
//     (default: each address's host). Naming any of them turns TLS on.
//   - --<side>-sasl-mechanism and --<side>-sasl-user, with the password
//     from --<side>-sasl-password-file (its contents, one trailing newline
//     dropped) or else $BATON_<SIDE>_SASL_PASSWORD: never from a flag, which
//     ps shows. No mechanism (the default) means no SASL.
//   - --<side>-sasl-mechanism OAUTHBEARER takes no user or password but one
//     token source: --<side>-sasl-oauth-token-file (read again at every
//     authentication, so a rotated token is used without a restart), or
//     --<side>-sasl-oauth-token-endpoint with --<side>-sasl-oauth-client-id,
//     the client secret from --<side>-sasl-oauth-client-secret-file or else
//     $BATON_<SIDE>_SASL_OAUTH_CLIENT_SECRET, and optionally
//     --<side>-sasl-oauth-scope (the client-credentials grant).
type securityFlags struct {
	tlsFlags
	mechanism, user, passFile string
	oauthFlags
}

// oauthFlags are one cluster's OAUTHBEARER token source flags.
type oauthFlags struct {
	tokenFile, endpoint, clientID, secretFile, scope string
	// src is made once, so that every client of the cluster and the
	// principal share one client-credentials token cache.
	src oauthbearer.Source
}

// tlsFlags are the TLS flags of one connection (a cluster, the control
// plane): --<side>-tls, --<side>-tls-ca, --<side>-tls-cert,
// --<side>-tls-key and --<side>-tls-server-name, as above.
type tlsFlags struct {
	side                      string
	tls                       bool
	caFile, certFile, keyFile string
	serverName                string
}

// add registers the flags on f; what names the peer in their help ("the
// source brokers").
func (s *tlsFlags) add(f stringFlags, side, what string) {
	s.side = side
	f.BoolVar(&s.tls, side+"-tls", false, "connect to "+what+" with TLS")
	f.StringVar(&s.caFile, side+"-tls-ca", "", "PEM CA bundle verifying "+what+" (default: the system's; implies TLS)")
	f.StringVar(&s.certFile, side+"-tls-cert", "", "PEM client certificate for "+what+" (with --"+side+"-tls-key; implies TLS)")
	f.StringVar(&s.serverName, side+"-tls-server-name", "", "name the certificates of "+what+" must carry (default: the host of each address dialed; implies TLS)")
	f.StringVar(&s.keyFile, side+"-tls-key", "", "PEM client key for "+what+" (with --"+side+"-tls-cert)")
}

// stringFlags is the part of a pflag.FlagSet that add uses.
type stringFlags interface {
	StringVar(p *string, name, value, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}

// add registers the flags of side ("source" or "destination") on f.
func (s *securityFlags) add(f stringFlags, side string) {
	s.side = side
	f.StringVar(&s.mechanism, side+"-sasl-mechanism", "", "SASL mechanism for the "+side+" cluster: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (empty: no SASL)")
	f.StringVar(&s.user, side+"-sasl-user", "", "SASL user for the "+side+" cluster")
	f.StringVar(&s.passFile, side+"-sasl-password-file", "", "file holding the SASL password for the "+side+" cluster (default: $"+s.envVar()+")")
	f.StringVar(&s.tokenFile, side+"-sasl-oauth-token-file", "", "OAUTHBEARER: file holding the bearer token for the "+side+" cluster, read again at every authentication (a rotated token is used without a restart)")
	f.StringVar(&s.endpoint, side+"-sasl-oauth-token-endpoint", "", "OAUTHBEARER: OAuth 2.0 token endpoint URL giving the "+side+" cluster's tokens by the client-credentials grant (instead of --"+side+"-sasl-oauth-token-file)")
	f.StringVar(&s.clientID, side+"-sasl-oauth-client-id", "", "OAUTHBEARER: client id at --"+side+"-sasl-oauth-token-endpoint")
	f.StringVar(&s.secretFile, side+"-sasl-oauth-client-secret-file", "", "OAUTHBEARER: file holding the client secret for --"+side+"-sasl-oauth-token-endpoint (default: $"+s.secretEnvVar()+")")
	f.StringVar(&s.scope, side+"-sasl-oauth-scope", "", "OAUTHBEARER: scope to ask --"+side+"-sasl-oauth-token-endpoint for, space-separated (default: the endpoint's)")
	s.tlsFlags.add(f, side, "the "+side+" brokers")
}

func (s *securityFlags) envVar() string { return "BATON_" + strings.ToUpper(s.side) + "_SASL_PASSWORD" }

func (s *securityFlags) secretEnvVar() string {
	return "BATON_" + strings.ToUpper(s.side) + "_SASL_OAUTH_CLIENT_SECRET"
}

// principal is the Kafka principal the flags authenticate as: User:<user>,
// or with OAUTHBEARER User:<the token's sub claim> (what Kafka's own
// validators name the client; the token is read or fetched for it), or ""
// without SASL. An OAUTHBEARER token that is not a JWT with a sub claim is
// an error: its principal is the broker's to say.
func (s *securityFlags) principal(ctx context.Context) (string, error) {
	if strings.ToUpper(s.mechanism) != oauthMechanism {
		if s.mechanism == "" || s.user == "" {
			return "", nil
		}
		return "User:" + s.user, nil
	}
	src, err := s.oauthSource()
	if err != nil {
		return "", err
	}
	tok, err := src.Token(ctx)
	if err != nil {
		return "", fmt.Errorf("the --%s-sasl-oauth-* token: %w", s.side, err)
	}
	sub, err := oauthbearer.Subject(tok)
	if err != nil {
		return "", fmt.Errorf("the --%s-sasl-oauth-* token names no principal: %w", s.side, err)
	}
	return "User:" + sub, nil
}

// opts returns the franz-go options the flags ask for (none by default).
func (s *securityFlags) opts() ([]kgo.Opt, error) {
	sec, err := s.agentSecurity()
	if err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if sec.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(sec.TLS))
	}
	if sec.SASL != nil {
		opts = append(opts, kgo.SASL(sec.SASL))
	}
	return opts, nil
}

// agentSecurity returns what the flags ask for as the agent takes it (the
// zero value by default: plaintext).
func (s *securityFlags) agentSecurity() (agent.Security, error) {
	cfg, err := s.tlsConfig()
	if err != nil {
		return agent.Security{}, err
	}
	mech, err := s.saslMechanism()
	if err != nil {
		return agent.Security{}, err
	}
	return agent.Security{TLS: cfg, SASL: mech}, nil
}

// tlsConfig returns the TLS config, or nil if TLS is not asked for.
func (s *tlsFlags) tlsConfig() (*tls.Config, error) {
	if !s.tls && s.caFile == "" && s.certFile == "" && s.keyFile == "" && s.serverName == "" {
		return nil, nil
	}
	p := "--" + s.side + "-tls-"
	cfg, err := clientTLS(namedFile{p + "ca", s.caFile}, namedFile{p + "cert", s.certFile}, namedFile{p + "key", s.keyFile})
	if err != nil {
		return nil, err
	}
	cfg.ServerName = s.serverName
	return cfg, nil
}

// clientTLS returns a TLS client config (TLS 1.2+) verifying the server
// with the PEM CA bundle in ca (default: the system's roots) and
// presenting the certificate in cert and key, if named; errors name the
// files' flags.
func clientTLS(ca, cert, key namedFile) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca.file != "" {
		pool, err := readCAFile(ca.name, ca.file)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (cert.file == "") != (key.file == "") {
		return nil, fmt.Errorf("%s and %s go together", cert.name, key.name)
	}
	if cert.file != "" {
		// Read again at each handshake that asks for it: a rotated
		// certificate is used without a restart.
		r, err := keypair.New(cert.file, key.file)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", cert.name, key.name, err)
		}
		r.ClientConfig(cfg)
	}
	return cfg, nil
}

// password reads the SASL password: the file's contents, else the
// environment variable.
func (s *securityFlags) password() (string, error) {
	if s.passFile == "" {
		return os.Getenv(s.envVar()), nil
	}
	b, err := os.ReadFile(s.passFile)
	if err != nil {
		return "", fmt.Errorf("--%s-sasl-password-file: %w", s.side, err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r"), nil
}

// oauthMechanism is the SASL mechanism name of OAuth 2.0 bearer tokens.
const oauthMechanism = "OAUTHBEARER"

// saslMechanism returns the SASL mechanism (nil without one).
func (s *securityFlags) saslMechanism() (sasl.Mechanism, error) {
	if strings.ToUpper(s.mechanism) == oauthMechanism {
		src, err := s.oauthSource()
		if err != nil {
			return nil, err
		}
		return oauthbearer.Mechanism(src), nil
	}
	if name := s.oauthFlagSet(); name != "" {
		return nil, fmt.Errorf("--%s-sasl-%s needs --%s-sasl-mechanism OAUTHBEARER", s.side, name, s.side)
	}
	if s.mechanism == "" {
		if s.user != "" || s.passFile != "" {
			return nil, fmt.Errorf("--%s-sasl-user and --%s-sasl-password-file need --%s-sasl-mechanism", s.side, s.side, s.side)
		}
		return nil, nil
	}
	// The name first: an unknown one is not a missing password.
	name := strings.ToUpper(s.mechanism)
	switch name {
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
	default:
		return nil, fmt.Errorf("--%s-sasl-mechanism: %q is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", s.side, s.mechanism)
	}
	if s.user == "" {
		return nil, fmt.Errorf("--%s-sasl-mechanism %s needs --%s-sasl-user", s.side, s.mechanism, s.side)
	}
	pass, err := s.password()
	if err != nil {
		return nil, err
	}
	if pass == "" {
		// Caught here, not as an authentication failure on every broker.
		return nil, fmt.Errorf("--%s-sasl-mechanism %s needs a password: --%s-sasl-password-file or $%s", s.side, s.mechanism, s.side, s.envVar())
	}
	// The password file is read again at each authentication (a new
	// connection, a KIP-368 re-authentication), so a rotated password is
	// used without a restart; while it cannot be read, or is empty
	// mid-rotation, the last one read is.
	var mu sync.Mutex
	current := func() string {
		if s.passFile == "" {
			return pass
		}
		mu.Lock()
		defer mu.Unlock()
		if p, err := s.password(); err == nil && p != "" {
			pass = p
		}
		return pass
	}
	user := s.user
	switch name {
	case "PLAIN":
		return plain.Plain(func(context.Context) (plain.Auth, error) { return plain.Auth{User: user, Pass: current()}, nil }), nil
	case "SCRAM-SHA-256":
		return scram.Sha256(func(context.Context) (scram.Auth, error) { return scram.Auth{User: user, Pass: current()}, nil }), nil
	}
	return scram.Sha512(func(context.Context) (scram.Auth, error) { return scram.Auth{User: user, Pass: current()}, nil }), nil
}

// oauthFlagSet names the first OAUTHBEARER flag given ("oauth-token-file"),
// or is "".
func (s *securityFlags) oauthFlagSet() string {
	for _, f := range []struct{ name, value string }{
		{"oauth-token-file", s.tokenFile}, {"oauth-token-endpoint", s.endpoint}, {"oauth-client-id", s.clientID},
		{"oauth-client-secret-file", s.secretFile}, {"oauth-scope", s.scope},
	} {
		if f.value != "" {
			return f.name
		}
	}
	return ""
}

// oauthSource checks the OAUTHBEARER flags and returns their token source,
// made on the first call.
func (s *securityFlags) oauthSource() (oauthbearer.Source, error) {
	if s.src != nil {
		return s.src, nil
	}
	p := "--" + s.side + "-sasl-"
	switch {
	case s.user != "" || s.passFile != "":
		return nil, fmt.Errorf("%suser and %spassword-file are not used with OAUTHBEARER, whose token names the principal", p, p)
	case s.tokenFile != "" && s.endpoint != "":
		return nil, fmt.Errorf("%soauth-token-file and %soauth-token-endpoint are two token sources: give one", p, p)
	case s.tokenFile != "":
		if s.clientID != "" || s.secretFile != "" || s.scope != "" {
			return nil, fmt.Errorf("%soauth-client-id, %soauth-client-secret-file and %soauth-scope go with %soauth-token-endpoint, not %soauth-token-file", p, p, p, p, p)
		}
		src := oauthbearer.File(s.tokenFile)
		// Read once now: a wrong path fails the start, not every
		// authentication.
		if _, err := src.Token(context.Background()); err != nil {
			return nil, fmt.Errorf("%soauth-token-file: %w", p, err)
		}
		s.src = src
	case s.endpoint != "":
		if err := checkTokenEndpoint(s.endpoint); err != nil {
			return nil, fmt.Errorf("%soauth-token-endpoint: %w", p, err)
		}
		if s.clientID == "" {
			return nil, fmt.Errorf("%soauth-token-endpoint needs %soauth-client-id", p, p)
		}
		secret, err := s.clientSecret()
		if err != nil {
			return nil, err
		}
		s.src = oauthbearer.NewClientCredentials(s.endpoint, s.clientID, secret, strings.Fields(s.scope))
	default:
		return nil, fmt.Errorf("%smechanism OAUTHBEARER needs a token source: %soauth-token-file or %soauth-token-endpoint", p, p, p)
	}
	return s.src, nil
}

// clientSecret reads the OAuth client secret: the file's contents, else
// the environment variable.
func (s *securityFlags) clientSecret() (string, error) {
	secret := os.Getenv(s.secretEnvVar())
	if s.secretFile != "" {
		b, err := os.ReadFile(s.secretFile)
		if err != nil {
			return "", fmt.Errorf("--%s-sasl-oauth-client-secret-file: %w", s.side, err)
		}
		secret = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	}
	if secret == "" {
		// Caught here, not as a refusal at the endpoint on every
		// authentication.
		return "", fmt.Errorf("--%s-sasl-oauth-token-endpoint needs a client secret: --%s-sasl-oauth-client-secret-file or $%s", s.side, s.side, s.secretEnvVar())
	}
	return secret, nil
}

// checkTokenEndpoint wants an https URL, or http to a loopback address
// (a local token proxy): plain http elsewhere would send the client secret
// and the tokens in the clear.
func checkTokenEndpoint(v string) error {
	if err := checkAddr(addrURL, v); err != nil {
		return err
	}
	u, _ := url.Parse(v) // checkAddr parsed it
	if u.Scheme == "http" && !loopback(net.JoinHostPort(u.Hostname(), "0")) {
		return fmt.Errorf("http:// would send the client secret in the clear: use https:// (http:// only to a loopback address)")
	}
	return nil
}

// readCAFile reads a PEM CA bundle named by flag.
func readCAFile(flag, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in %s", flag, file)
	}
	return pool, nil
}
