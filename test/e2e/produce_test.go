package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/test/clients"
)

// TestProduceThroughAgent runs the client matrix through the agent on each
// source: every client with idempotence on and off, uncompressed; every
// client with each codec it supports, idempotent; and every client with its
// topic routed PROXY. Each run must be where its client was told
// (clients.Verify, reading the source directly) and stored in batches
// byte-identical to what the client sent (checkCRCs).
func TestProduceThroughAgent(t *testing.T) {
	for _, l := range envs {
		t.Run(l.name, func(t *testing.T) {
			e := l.get(t)
			for _, c := range clients.Matrix() {
				for _, idempotent := range []bool{true, false} {
					t.Run(fmt.Sprintf("%s/idempotent=%v", c.Name(), idempotent), func(t *testing.T) {
						t.Parallel()
						produceCase(t, e, c, produceSpec{records: 1000, idempotent: idempotent})
					})
				}
				for _, codec := range c.Codecs {
					t.Run(c.Name()+"/"+codec, func(t *testing.T) {
						t.Parallel()
						produceCase(t, e, c, produceSpec{records: 200, idempotent: true, codec: codec})
					})
				}
				// PROXY: the same data path with the topic managed. Use the
				// client's last codec, so PROXY also carries compressed
				// batches.
				codec := ""
				if n := len(c.Codecs); n > 0 {
					codec = c.Codecs[n-1]
				}
				t.Run(c.Name()+"/proxy", func(t *testing.T) {
					t.Parallel()
					produceCase(t, e, c, produceSpec{records: 300, idempotent: true, codec: codec, proxy: true})
				})
			}
		})
	}
}

type produceSpec struct {
	records    int
	idempotent bool
	codec      string
	proxy      bool
}

func produceCase(t *testing.T, e *env, c clients.Client, s produceSpec) {
	ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
	defer cancel()
	what := fmt.Sprintf("%s-idem%v-%s", c.Name(), s.idempotent, s.codec)
	if s.proxy {
		what += "-proxy"
	}
	topic := freshTopic(t, ctx, e, what, 6)
	if s.proxy {
		e.setRoute(topic, migration.Proxy)
	}
	cfg := clients.ProduceConfig{
		Bootstrap:   e.agent,
		Topic:       topic,
		Records:     s.records,
		Idempotent:  s.idempotent,
		Compression: s.codec,
		Headers:     c.Headers,
		KeyPrefix:   what,
	}
	acks := produce(t, ctx, c, cfg)
	if err := clients.Verify(ctx, e.source, topic, acks, cfg); err != nil {
		t.Fatalf("%s through the agent to the %s source: %v", c.Name(), e.name, err)
	}
	checkCRCs(t, ctx, e, topic)
}
