package clients

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/oauthtest"
)

// TestSecurityConfigs checks what each driver makes of a Security without
// running a client (TestSecuredEveryClient in test/e2e runs them): the
// checks, the protocol names, kcat's and the scripts' settings, and the
// Java producer's properties (escaped, with a PEM keystore file for mTLS).
func TestSecurityConfigs(t *testing.T) {
	t.Parallel()
	for name, sec := range map[string]Security{
		"no CA":                {TLS: &TLS{}},
		"cert without key":     {TLS: &TLS{CAFile: "ca.pem", CertFile: "c.pem"}},
		"unknown mechanism":    {SASL: &SASL{Mechanism: "GSSAPI", User: "u", Password: "p"}},
		"PLAIN without pass":   {SASL: &SASL{Mechanism: MechPlain, User: "u"}},
		"OAUTHBEARER no token": {SASL: &SASL{Mechanism: MechOAuthBearer}},
		"token with user":      {SASL: &SASL{Mechanism: MechOAuthBearer, Token: "t", User: "u"}},
	} {
		if err := sec.check(); err == nil {
			t.Errorf("%s: check accepted %+v", name, sec)
		}
	}
	for want, sec := range map[string]Security{
		"PLAINTEXT":      {},
		"SSL":            {TLS: &TLS{CAFile: "ca.pem"}},
		"SASL_PLAINTEXT": {SASL: &SASL{Mechanism: MechPlain, User: "u", Password: "p"}},
		"SASL_SSL":       {TLS: &TLS{CAFile: "ca.pem"}, SASL: &SASL{Mechanism: MechPlain, User: "u", Password: "p"}},
	} {
		if got := sec.Protocol(); got != want {
			t.Errorf("Protocol of %+v = %s, want %s", sec, got, want)
		}
	}

	dir := t.TempDir()
	for _, f := range []string{"key.pem", "cert.pem"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("-----BEGIN "+f+"-----\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mtls := &TLS{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	scram := Security{TLS: mtls, SASL: &SASL{Mechanism: MechScramSHA512, User: "app", Password: `p"w\d`}}

	args := strings.Join(kcatSecurity(scram), " ")
	for _, want := range []string{"security.protocol=sasl_ssl", "ssl.ca.location=" + mtls.CAFile, "ssl.certificate.location=" + mtls.CertFile,
		"ssl.key.location=" + mtls.KeyFile, "sasl.mechanisms=SCRAM-SHA-512", "sasl.username=app", `sasl.password=p"w\d`} {
		if !strings.Contains(args, want) {
			t.Errorf("kcat arguments %q lack %q", args, want)
		}
	}

	props, err := javaProducerConfig(ProduceConfig{Bootstrap: "h:1", Security: scram}, dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(props, "\n")
	for _, want := range []string{"security.protocol=SASL_SSL", "ssl.truststore.type=PEM", "ssl.truststore.location=" + mtls.CAFile,
		"ssl.keystore.type=PEM", "ssl.keystore.location=" + filepath.Join(dir, "keystore.pem"), "sasl.mechanism=SCRAM-SHA-512",
		// JAAS quotes, then properties escapes: p"w\d is "p\"w\\d" in
		// JAAS, each backslash doubled again in the file.
		`sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="app" password="p\\"w\\\\d";`} {
		if !slices.Contains(lines, want) {
			t.Errorf("Java producer properties lack %q:\n%s", want, props)
		}
	}
	ks, err := os.ReadFile(filepath.Join(dir, "keystore.pem"))
	if err != nil || string(ks) != "-----BEGIN key.pem-----\n\n-----BEGIN cert.pem-----\n" {
		t.Errorf("PEM keystore = %q, %v; want the key, then the certificate", ks, err)
	}

	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	tok := oauthtest.UnsecuredJWT(map[string]any{"sub": "app", "exp": exp.Unix()})
	ss := newScriptSecurity(Security{SASL: &SASL{Mechanism: MechOAuthBearer, Token: tok}})
	if ss.Protocol != "SASL_PLAINTEXT" || ss.Token != tok || ss.Principal != "app" || ss.ExpiresMs != exp.UnixMilli() {
		t.Errorf("script security of a token = %+v, want its sub and exp", ss)
	}
	props, err = javaProducerConfig(ProduceConfig{Bootstrap: "h:1", Security: Security{SASL: &SASL{Mechanism: MechOAuthBearer, Token: tok}}}, dir)
	if err != nil || !strings.Contains(props, "sasl.login.callback.handler.class=BatonProducer$GivenToken") ||
		!strings.Contains(props, `batonPrincipal="app"`) {
		t.Errorf("Java producer properties for a token: %v\n%s", err, props)
	}
	if newScriptSecurity(Security{}) != nil {
		t.Error("script security of the zero Security is not nil")
	}
	if err := (Kcat{}).Produce(t.Context(), ProduceConfig{Bootstrap: "h:1", Topic: "t", Records: 1,
		Security: Security{SASL: &SASL{Mechanism: MechOAuthBearer, Token: tok}}}, func(Ack) {}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("kcat with an OAUTHBEARER token: %v, want ErrUnsupported", err)
	}
}
