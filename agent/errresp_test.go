package agent_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
)

// TestSourceDownAnswersRetriableOnAnOpenConnection: through the agent a
// client sees one broker, the agent, so a cluster failing behind it must
// not close the client's connection (librdkafka would count its only
// broker down, and kcat exits). With the source gone, metadata, producer
// id and group requests are answered with the retriable error a broker
// gives while a leader or coordinator is unavailable, and the same
// connection still answers the next request.
func TestSourceDownAnswersRetriableOnAnOpenConnection(t *testing.T) {
	t.Parallel()
	f := startFixture(t, nil)
	c := agent.DialRaw(t, f.addr)
	if _, err := c.Request(kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatal(err)
	}
	f.src.Close()

	topic := "orders"
	metadata := kmsg.NewPtrMetadataRequest()
	metadata.Version = 9
	metadata.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	allTopics := kmsg.NewPtrMetadataRequest()
	allTopics.Version = 1 // nil topics: all of them
	initPID := kmsg.NewPtrInitProducerIDRequest()
	initPID.Version, initPID.TransactionTimeoutMillis = 4, 60000
	join := kmsg.NewPtrJoinGroupRequest()
	join.Version, join.Group, join.ProtocolType = 5, "g", "consumer"
	join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = 10000, 10000
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Version, commit.Group, commit.Generation, commit.MemberID = 7, "g", 1, "m"
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 2, Offset: 10}}}}
	fetchOffsets := kmsg.NewPtrOffsetFetchRequest()
	fetchOffsets.Version, fetchOffsets.Group = 7, "g"

	for _, tc := range []struct {
		name  string
		req   kmsg.Request
		codes func(kmsg.Response) []int16
		want  int16
	}{
		{"metadata", metadata, func(r kmsg.Response) []int16 {
			m := r.(*kmsg.MetadataResponse)
			if len(m.Brokers) != 1 || len(m.Topics) != 1 || *m.Topics[0].Topic != topic {
				t.Errorf("metadata: brokers %v, topics %v; want the agent and %q", m.Brokers, m.Topics, topic)
			}
			return []int16{m.Topics[0].ErrorCode}
		}, kerr.LeaderNotAvailable.Code},
		{"metadata of all topics", allTopics, func(r kmsg.Response) []int16 {
			m := r.(*kmsg.MetadataResponse)
			if len(m.Brokers) != 1 {
				t.Errorf("metadata: brokers %v; want the agent", m.Brokers)
			}
			var codes []int16 // no routes here: no topics
			for _, t := range m.Topics {
				codes = append(codes, t.ErrorCode)
			}
			return codes
		}, kerr.LeaderNotAvailable.Code},
		{"idempotent producer id", initPID, func(r kmsg.Response) []int16 {
			return []int16{r.(*kmsg.InitProducerIDResponse).ErrorCode}
		}, kerr.CoordinatorLoadInProgress.Code},
		{"join group", join, func(r kmsg.Response) []int16 {
			return []int16{r.(*kmsg.JoinGroupResponse).ErrorCode}
		}, kerr.CoordinatorNotAvailable.Code},
		{"offset commit", commit, func(r kmsg.Response) []int16 {
			m := r.(*kmsg.OffsetCommitResponse)
			if len(m.Topics) != 1 || len(m.Topics[0].Partitions) != 1 || m.Topics[0].Partitions[0].Partition != 2 {
				t.Errorf("offset commit: answered %+v; want %s/2", m.Topics, topic)
				return nil
			}
			return []int16{m.Topics[0].Partitions[0].ErrorCode}
		}, kerr.CoordinatorNotAvailable.Code},
		{"offset fetch", fetchOffsets, func(r kmsg.Response) []int16 {
			return []int16{r.(*kmsg.OffsetFetchResponse).ErrorCode}
		}, kerr.CoordinatorNotAvailable.Code},
	} {
		resp, err := c.Request(tc.req)
		if err != nil {
			t.Fatalf("%s with the source down: %v; want an answer on the open connection", tc.name, err)
		}
		for _, code := range tc.codes(resp) {
			if code != tc.want {
				t.Errorf("%s: error %v, want %v", tc.name, kerr.ErrorForCode(code), kerr.ErrorForCode(tc.want))
			}
			if !kerr.IsRetriable(kerr.ErrorForCode(code)) {
				t.Errorf("%s: error %v is not retriable", tc.name, kerr.ErrorForCode(code))
			}
		}
	}
	if _, err := c.Request(kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatalf("after the source went down: %v; want the connection open", err)
	}
}
