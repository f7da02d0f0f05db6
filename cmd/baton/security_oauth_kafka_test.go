package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/oauthtest"
	"github.com/baton-kafka/baton/internal/testlog"
	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/test/kafka"
)

// TestOAuthBearerKafka runs the OAUTHBEARER flags against Apache Kafka whose
// client listener takes only SASL/OAUTHBEARER, checked by Kafka's default
// validator of unsecured JWTs (sub and exp claims), and whose sessions end
// when their token expires (connections.max.reauth.ms). kfake has no
// OAUTHBEARER.
//
//   - franz-go clients built from the flags produce, with a token file and
//     with a client-credentials token endpoint; a client whose file holds an
//     expired token is refused, and produces once the file is rewritten
//     with a valid one, without a new client.
//   - The agent, given the flags' agent.Security for both clusters,
//     authenticates its upstream connections, and a producer through it is
//     acked and read back. Its token file is then rotated: past the first
//     token's expiry, which ends every session made with it, the agent
//     still produces, so its new connections read the new token. An agent
//     whose file is not rotated cannot, which shows the broker does end
//     those sessions.
func TestOAuthBearerKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Apache Kafka")
	}
	t.Parallel()
	dir := t.TempDir()
	token := func(sub string, exp time.Time) string {
		return oauthtest.UnsecuredJWT(map[string]any{"sub": sub, "exp": exp.Unix()})
	}
	// writeToken writes dir/name, a token (or a client secret), and
	// returns its path.
	writeToken := func(t *testing.T, name, tok string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := kafka.StartT(t, kafka.Brokers(1),
		// The listener named PLAINTEXT speaks SASL_PLAINTEXT (the
		// controller listener stays PLAINTEXT); with no
		// sasl.server.callback.handler.class, Kafka validates unsecured
		// JWTs, naming the client User:<sub>.
		kafka.BrokerConfig("listener.security.protocol.map", "PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"),
		kafka.BrokerConfig("sasl.enabled.mechanisms", "OAUTHBEARER"),
		kafka.BrokerConfig("sasl.mechanism.inter.broker.protocol", "OAUTHBEARER"),
		kafka.BrokerConfig("listener.name.plaintext.oauthbearer.sasl.jaas.config",
			`org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker";`),
		// A session ends no later than its token: SaslAuthenticate
		// states the lifetime and the broker closes a connection used
		// past it.
		kafka.BrokerConfig("connections.max.reauth.ms", "3600000"),
		kafka.ClientOpts(kgo.SASL(oauth.Auth{Token: token("admin", time.Now().Add(time.Hour))}.AsMechanism())))
	bootstrap := c.Addrs()

	// flags parses args as side's security flags.
	flags := func(t *testing.T, side string, args ...string) *securityFlags {
		t.Helper()
		var s securityFlags
		cmd := &cobra.Command{}
		s.add(cmd.Flags(), side)
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	// client is a franz-go client of the cluster with the flags' options.
	client := func(t *testing.T, s *securityFlags, extra ...kgo.Opt) *kgo.Client {
		t.Helper()
		opts, err := s.opts()
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(bootstrap...)}, opts...), extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	produce := func(cl *kgo.Client, topic, value string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
	}
	adminFlags := flags(t, "destination", "--destination-sasl-mechanism", "OAUTHBEARER",
		"--destination-sasl-oauth-token-file", writeToken(t, "admin", token("admin", time.Now().Add(time.Hour))))
	adm := kadm.NewClient(client(t, adminFlags))
	for _, topic := range []string{"oauth-flags", "oauth-agent"} {
		resp, err := adm.CreateTopic(context.Background(), 3, 1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("creating %s: %v", topic, err)
		}
	}

	t.Run("franz-go clients from the flags", func(t *testing.T) {
		e := oauthtest.NewEndpoint(t, oauthtest.Config{ExpiresIn: 3600, Mint: func(int64) string {
			return token("baton-cc", time.Now().Add(time.Hour))
		}})
		secretFile := writeToken(t, "client-secret", e.Secret)
		for _, tc := range []struct {
			name string
			args []string
		}{
			{"token file", []string{"--destination-sasl-oauth-token-file", writeToken(t, "replicator", token("baton-repl", time.Now().Add(time.Hour)))}},
			{"token endpoint", []string{"--destination-sasl-oauth-token-endpoint", e.URL + "/token", "--destination-sasl-oauth-client-id", e.ClientID,
				"--destination-sasl-oauth-client-secret-file", secretFile}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := flags(t, "destination", append([]string{"--destination-sasl-mechanism", "OAUTHBEARER"}, tc.args...)...)
				if err := produce(client(t, s), "oauth-flags", tc.name); err != nil {
					t.Fatalf("producing with OAUTHBEARER (%s): %v", tc.name, err)
				}
			})
		}
		if e.Served.Load() == 0 {
			t.Error("the token endpoint served no token")
		}
	})

	t.Run("a token file rewritten while the client runs", func(t *testing.T) {
		path := writeToken(t, "rotated-client", token("baton-late", time.Now().Add(-time.Minute)))
		s := flags(t, "destination", "--destination-sasl-mechanism", "OAUTHBEARER", "--destination-sasl-oauth-token-file", path)
		cl := client(t, s, kgo.RecordDeliveryTimeout(10*time.Second))
		err := produce(cl, "oauth-flags", "expired")
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("producing with an expired token: %v, want SASL_AUTHENTICATION_FAILED", err)
		}
		writeToken(t, "rotated-client", token("baton-late", time.Now().Add(time.Hour)))
		wait.For(t, 60*time.Second, "the same client to produce with the rewritten token", func() string {
			if err := produce(cl, "oauth-flags", "rotated"); err != nil {
				return err.Error()
			}
			return ""
		})
	})

	t.Run("the agent", func(t *testing.T) {
		// Long enough for the agent to start and produce once on a busy
		// machine; every wait below is for this instant.
		const life = 30 * time.Second
		firstExp := time.Now().Add(life)
		first := token("baton-agent", firstExp)
		startAgent := func(t *testing.T, file string, log io.Writer) *agent.Agent {
			t.Helper()
			args := func(side string) []string {
				return []string{"--" + side + "-sasl-mechanism", "OAUTHBEARER", "--" + side + "-sasl-oauth-token-file", file}
			}
			src, err := flags(t, "source", args("source")...).agentSecurity()
			if err != nil {
				t.Fatal(err)
			}
			dst, err := flags(t, "destination", args("destination")...).agentSecurity()
			if err != nil {
				t.Fatal(err)
			}
			a, err := agent.New(agent.Listen("127.0.0.1:0"), agent.Source(bootstrap...), agent.Destination(bootstrap...),
				agent.SourceSecurity(src), agent.DestinationSecurity(dst),
				agent.Logger(slog.New(slog.NewTextHandler(log, nil))))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("agent.Run: %v", err)
				}
			})
			select {
			case <-a.Ready():
			case err := <-done:
				t.Fatalf("agent.Run returned before serving: %v", err)
			case <-time.After(time.Until(firstExp)):
				t.Fatal("the agent did not serve while its first token was valid (the source never answered it)")
			}
			return a
		}
		through := func(t *testing.T, a *agent.Agent) *kgo.Client {
			t.Helper()
			cl, err := kgo.NewClient(kgo.SeedBrokers(a.Addr()), kgo.RecordDeliveryTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Close)
			return cl
		}
		var rotatedLog, staleLog testlog.Buffer
		rotated := startAgent(t, writeToken(t, "agent-rotated", first), &rotatedLog)
		stale := startAgent(t, writeToken(t, "agent-stale", first), &staleLog)
		viaRotated, viaStale := through(t, rotated), through(t, stale)
		for i, cl := range []*kgo.Client{viaRotated, viaStale} {
			if err := produce(cl, "oauth-agent", "before-"+strconv.Itoa(i)); err != nil {
				t.Fatalf("producing through agent %d: %v", i, err)
			}
		}
		second := token("baton-agent", time.Now().Add(time.Hour))
		writeToken(t, "agent-rotated", second)
		// Not a sleep deciding the outcome: the sessions made with the
		// first token are over once it has expired (and a second more,
		// since exp has whole seconds).
		wait.For(t, 2*life, "the first token to expire", func() string {
			if left := time.Until(firstExp.Add(time.Second)); left > 0 {
				return fmt.Sprintf("%v left", left)
			}
			return ""
		})
		if err := produce(viaRotated, "oauth-agent", "after-rotation"); err != nil {
			t.Fatalf("producing through the agent past the first token's expiry, its file rotated: %v", err)
		}
		err := produce(viaStale, "oauth-agent", "stale")
		if err == nil {
			t.Fatal("an agent whose token expired still produced: the broker does not end sessions, and the rotation above proves nothing")
		}
		t.Logf("through the agent whose token expired: %v", err)
		wait.For(t, 30*time.Second, "the agent whose token expired to say the brokers refused it", func() string {
			if !strings.Contains(staleLog.String(), "SASL authentication failed with OAUTHBEARER") {
				return "no such WARN in its log"
			}
			return ""
		})
		for _, log := range []string{rotatedLog.String(), staleLog.String()} {
			if strings.Contains(log, first) || strings.Contains(log, second) {
				t.Errorf("an agent logged its token:\n%s", log)
			}
		}
		for _, line := range strings.Split(staleLog.String(), "\n") {
			if strings.Contains(line, "OAUTHBEARER") {
				t.Logf("the agent whose token expired: %s", line)
				break
			}
		}
		// What the agent acked is in the topic, read with the flags'
		// client.
		got := map[string]bool{}
		cl := client(t, adminFlags, kgo.ConsumeTopics("oauth-agent"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for !got["before-0"] || !got["before-1"] || !got["after-rotation"] {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("read %v of the agent's acked records: %v", got, ctx.Err())
			}
			fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
		}
	})
}
