package agent_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/internal/testcert"
	"github.com/baton-kafka/baton/migration"
)

// TestSecuredClusters: a source that takes only SCRAM-SHA-256 over TLS and
// a destination that takes only SASL PLAIN. A plaintext producer through
// the agent (idempotent, franz-go's default) writes an unmanaged topic,
// which goes to the source, and a COMPLETE one, which goes to the
// destination under a producer id the agent got from it; each record is
// read back from its cluster directly, with that cluster's credentials.
func TestSecuredClusters(t *testing.T) {
	t.Parallel()
	ca := testcert.New(t)
	src, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID("source"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{ca.Server}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "agent-src", "src-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID("destination"),
		kfake.EnableSASL(), kfake.Superuser("PLAIN", "agent-dst", "dst-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	srcTLS := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	srcMech := scram.Auth{User: "agent-src", Pass: "src-secret"}.AsSha256Mechanism()
	dstMech := plain.Auth{User: "agent-dst", Pass: "dst-secret"}.AsMechanism()
	srcOpts := []kgo.Opt{kgo.SeedBrokers(src.ListenAddrs()...), kgo.DialTLSConfig(srcTLS), kgo.SASL(srcMech)}
	dstOpts := []kgo.Opt{kgo.SeedBrokers(dst.ListenAddrs()...), kgo.SASL(dstMech)}

	const toSource, toDestination = "secured-src", "secured-dst"
	for _, c := range []struct {
		topic string
		opts  []kgo.Opt
	}{{toSource, srcOpts}, {toDestination, dstOpts}, {toDestination, srcOpts}} {
		adm := kadm.NewClient(newClient(t, "", c.opts...))
		if resp, err := adm.CreateTopic(context.Background(), 3, 1, nil, c.topic); err != nil || resp.Err != nil {
			t.Fatalf("creating %s: %v %v", c.topic, err, resp.Err)
		}
	}

	a, err := agent.New(agent.Listen("127.0.0.1:0"),
		agent.Source(src.ListenAddrs()...), agent.Destination(dst.ListenAddrs()...),
		agent.SourceSecurity(agent.Security{TLS: srcTLS, SASL: srcMech}),
		agent.DestinationSecurity(agent.Security{SASL: dstMech}),
		agent.Routes(agent.NewRouteTable([]agent.Route{{Topic: toDestination, State: migration.Complete}})),
		agent.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, a)

	cl := newClient(t, a.Addr())
	srcAcks := produceN(t, cl, toSource, 30)
	dstAcks := produceN(t, cl, toDestination, 30)
	checkAcked(t, srcAcks, readAllWith(t, toSource, 30, srcOpts...))
	checkAcked(t, dstAcks, readAllWith(t, toDestination, 30, dstOpts...))
}
