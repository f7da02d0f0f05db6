package clients

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Client is one client of the matrix and what its driver supports.
type Client struct {
	Producer
	// Headers says whether the driver can send the per-record headers
	// (ProduceConfig.Headers).
	Headers bool
	// Codecs lists the compression codecs the client applies, besides none.
	Codecs []string
}

// AllCodecs lists every compression codec besides none.
func AllCodecs() []string { return []string{"gzip", "snappy", "lz4", "zstd"} }

// Matrix lists every client of the matrix, with the zero value of each
// driver, in a fixed order. It is the one table the smoke tests and the
// end-to-end tests run.
func Matrix() []Client {
	return []Client{
		{Producer: Franz{}, Headers: true, Codecs: AllCodecs()},
		{Producer: Sarama{}, Headers: true, Codecs: AllCodecs()},
		// kcat: -H is per run, so no per-record baton-seq; Debian's
		// librdkafka 2.0.2 cannot compress gzip, snappy or lz4 for Kafka 4
		// or kfake (see Kcat).
		{Producer: Kcat{}, Headers: false, Codecs: kcatCodecs()},
		// kafkajs ships gzip only; the other codecs need plugins.
		{Producer: Kafkajs{}, Headers: true, Codecs: []string{"gzip"}},
		{Producer: Python{}, Headers: true, Codecs: AllCodecs()},
		{Producer: Java{}, Headers: true, Codecs: AllCodecs()},
	}
}

// CreateTopic creates topic on the cluster at bootstrap (comma-separated)
// with the given partition count and replication factor, then waits (up to
// a minute, or until ctx ends) until every broker's metadata lists the topic
// with every partition led, so that a client dialing any broker next finds
// it. opts are added to its client's (TLS, SASL: Security.KgoOpts).
func CreateTopic(ctx context.Context, bootstrap, topic string, partitions int32, replicationFactor int16, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bootstrapList(bootstrap)...), kgo.ClientID("baton-create-topic")}, opts...)...)
	if err != nil {
		return fmt.Errorf("clients: creating topic %s: %w", topic, err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, replicationFactor, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("clients: creating topic %s: %w", topic, err)
	}
	if err := waitTopicEverywhere(ctx, cl, topic, int(partitions)); err != nil {
		return fmt.Errorf("clients: topic %s: %w", topic, err)
	}
	return nil
}

// waitTopicEverywhere waits until every broker's metadata has topic with n
// partitions, each with a leader.
func waitTopicEverywhere(ctx context.Context, cl *kgo.Client, topic string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last error
	for {
		last = topicReadyEverywhere(ctx, cl, topic, n)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready on every broker: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func topicReadyEverywhere(ctx context.Context, cl *kgo.Client, topic string, n int) error {
	brokers, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil {
		return err
	}
	if len(brokers) == 0 {
		return errors.New("no brokers listed")
	}
	for _, b := range brokers {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
		if err != nil {
			return fmt.Errorf("broker %d: %w", b.NodeID, err)
		}
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 || len(resp.Topics[0].Partitions) != n {
			return fmt.Errorf("broker %d does not list the topic with %d partitions yet", b.NodeID, n)
		}
		for _, p := range resp.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader < 0 {
				return fmt.Errorf("broker %d: partition %d has no leader yet", b.NodeID, p.Partition)
			}
		}
	}
	return nil
}
