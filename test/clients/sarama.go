package clients

import (
	"context"
	"fmt"
	"strconv"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// Sarama drives IBM/sarama's AsyncProducer in process, with sarama's
// defaults (protocol version, hash partitioner, retries) except where
// ProduceConfig says otherwise: acks=all (WaitForAll), idempotence on
// (which sarama requires to come with Net.MaxOpenRequests=1) or off, and the
// compression codec; and the Security: Net.TLS, and Net.SASL with every
// mechanism (SCRAM through xdg-go/scram, which sarama leaves to the
// application; OAUTHBEARER through a TokenProvider that hands out the
// given token).
type Sarama struct {
	// Config, when set, is the base configuration (copied, then the fields
	// above overridden); optional.
	Config *sarama.Config
}

// Name is "sarama".
func (Sarama) Name() string { return "sarama" }

func saramaCodec(name string) sarama.CompressionCodec {
	switch name {
	case "gzip":
		return sarama.CompressionGZIP
	case "snappy":
		return sarama.CompressionSnappy
	case "lz4":
		return sarama.CompressionLZ4
	case "zstd":
		return sarama.CompressionZSTD
	}
	return sarama.CompressionNone
}

// Produce implements Producer. When ctx ends it reports every record
// without an outcome as failed and returns ctx's error.
func (s Sarama) Produce(ctx context.Context, cfg ProduceConfig, onAck func(Ack)) error {
	if err := checkProduceConfig(cfg); err != nil {
		return err
	}
	if err := noTransactions("sarama", cfg); err != nil {
		return err
	}
	conf := sarama.NewConfig()
	if s.Config != nil {
		c := *s.Config
		conf = &c
	}
	conf.ClientID = "baton-sarama"
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Producer.Return.Successes = true
	conf.Producer.Return.Errors = true
	conf.Producer.Compression = saramaCodec(cfg.Compression)
	conf.Producer.Idempotent = cfg.Idempotent
	if cfg.Idempotent {
		conf.Net.MaxOpenRequests = 1
		if !conf.Version.IsAtLeast(sarama.V0_11_0_0) {
			conf.Version = sarama.V0_11_0_0
		}
	}
	if cfg.Compression == "zstd" && !conf.Version.IsAtLeast(sarama.V2_1_0_0) {
		conf.Version = sarama.V2_1_0_0
	}
	if err := saramaSecurity(conf, cfg.Security); err != nil {
		return err
	}
	p, err := sarama.NewAsyncProducer(bootstrapList(cfg.Bootstrap), conf)
	if err != nil {
		return fmt.Errorf("clients: sarama: %w", err)
	}

	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		pc := newPacer(cfg)
		for seq := 0; seq < cfg.Records; seq++ {
			if pc.wait(feedCtx, seq) != nil {
				return
			}
			m := &sarama.ProducerMessage{
				Topic:    cfg.Topic,
				Key:      sarama.StringEncoder(Key(cfg.KeyPrefix, seq)),
				Value:    sarama.StringEncoder(Value(cfg.KeyPrefix, seq)),
				Metadata: seq,
			}
			if cfg.Headers {
				m.Headers = []sarama.RecordHeader{
					{Key: []byte("baton-client"), Value: []byte("sarama")},
					{Key: []byte("baton-seq"), Value: []byte(strconv.Itoa(seq))},
				}
			}
			select {
			case p.Input() <- m:
			case <-feedCtx.Done():
				return
			}
		}
	}()

	t := newAckTracker(cfg, onAck)
	ack := func(m *sarama.ProducerMessage, err error) {
		seq, _ := m.Metadata.(int)
		a := Ack{Seq: seq, Key: Key(cfg.KeyPrefix, seq), Partition: m.Partition, Offset: m.Offset}
		if err != nil {
			a.Partition, a.Offset, a.Err = -1, -1, err.Error()
		}
		t.report(a)
	}
	for !t.complete() {
		select {
		case m := <-p.Successes():
			ack(m, nil)
		case pe := <-p.Errors():
			ack(pe.Msg, pe.Err)
		case <-ctx.Done():
			stopFeed()
			<-fed
			// Report what sarama has already answered, then fail the rest.
			for drained := false; !drained; {
				select {
				case m := <-p.Successes():
					ack(m, nil)
				case pe := <-p.Errors():
					ack(pe.Msg, pe.Err)
				default:
					drained = true
				}
			}
			t.failRest(fmt.Sprintf("sarama driver stopped before the client reported this record: %v", ctx.Err()))
			// The producer may hold records in flight: close it in the
			// background, reading its channels until they close, as
			// sarama requires.
			go func() {
				p.AsyncClose()
				for range p.Successes() {
				}
			}()
			go func() {
				for range p.Errors() {
				}
			}()
			return fmt.Errorf("clients: sarama: %w", ctx.Err())
		}
	}
	<-fed
	if err := p.Close(); err != nil {
		return fmt.Errorf("clients: sarama: closing the producer: %w", err)
	}
	return nil
}

// saramaSecurity sets conf's Net.TLS and Net.SASL as sec says.
func saramaSecurity(conf *sarama.Config, sec Security) error {
	if sec.TLS != nil {
		tc, err := sec.TLS.Config()
		if err != nil {
			return err
		}
		conf.Net.TLS.Enable, conf.Net.TLS.Config = true, tc
	}
	a := sec.SASL
	if a == nil {
		return nil
	}
	conf.Net.SASL.Enable = true
	conf.Net.SASL.Handshake = true
	conf.Net.SASL.Version = sarama.SASLHandshakeV1 // SaslAuthenticate, which the agent requires
	conf.Net.SASL.User, conf.Net.SASL.Password = a.User, a.Password
	switch a.Mechanism {
	case MechPlain:
		conf.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	case MechScramSHA256:
		conf.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		conf.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaSCRAM{gen: scram.SHA256} }
	case MechScramSHA512:
		conf.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		conf.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaSCRAM{gen: scram.SHA512} }
	case MechOAuthBearer:
		conf.Net.SASL.Mechanism = sarama.SASLTypeOAuth
		conf.Net.SASL.TokenProvider = saramaToken(a.Token)
	default:
		return fmt.Errorf("%w: sarama: SASL mechanism %q", ErrUnsupported, a.Mechanism)
	}
	return nil
}

// saramaToken is a sarama.AccessTokenProvider of one token.
type saramaToken string

func (t saramaToken) Token() (*sarama.AccessToken, error) {
	return &sarama.AccessToken{Token: string(t)}, nil
}

// saramaSCRAM is sarama's SCRAMClient on xdg-go/scram.
type saramaSCRAM struct {
	gen  scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (s *saramaSCRAM) Begin(user, pass, authzID string) error {
	c, err := s.gen.NewClient(user, pass, authzID)
	if err != nil {
		return err
	}
	s.conv = c.NewConversation()
	return nil
}

func (s *saramaSCRAM) Step(challenge string) (string, error) { return s.conv.Step(challenge) }
func (s *saramaSCRAM) Done() bool                            { return s.conv.Done() }
