package agent

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent/internal/upstream"
)

// epochs hands out synthetic leader epochs. Clients drop metadata whose
// epoch went backwards (Java, librdkafka) and franz-go never takes -1 after
// a real epoch, while real epochs differ between the two clusters; so the
// agent reports its own epoch per partition, bumped whenever the upstream
// (cluster, leader, epoch) behind it changes. The base is the seconds since
// 2025 at start, so a restarted agent starts above where the last one
// stood unless it bumped a partition more often than once a second.
type epochs struct {
	mu   sync.Mutex
	base int32
	m    map[tp]epochState
}

type epochState struct {
	up      *upstream.Cluster
	leader  int32
	upEpoch int32
	syn     int32
}

var epochsEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newEpochs(now time.Time) *epochs {
	return &epochs{base: int32(now.Sub(epochsEpoch) / time.Second), m: map[tp]epochState{}}
}

func (e *epochs) get(up *upstream.Cluster, topic string, partition, leader, upEpoch int32) int32 {
	k := tp{topic, partition}
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.m[k]
	switch {
	case !ok:
		st = epochState{up, leader, upEpoch, e.base}
	case st.up != up || st.leader != leader || st.upEpoch != upEpoch:
		st = epochState{up, leader, upEpoch, st.syn + 1}
	}
	e.m[k] = st
	return st.syn
}

// topicID is the id the agent reports for topic: derived from its name, so
// it is the same whichever cluster the topic routes to and across agent
// restarts. Real ids differ between the clusters, and clients treat a
// changed id as a deleted and recreated topic (franz-go fails buffered
// records with UNKNOWN_TOPIC_ID). Requests that name topics by id are not
// advertised (Produce and Fetch stop at v12), so no id goes upstream.
func topicID(topic string) [16]byte {
	sum := sha256.Sum256([]byte("baton topic id\x00" + topic))
	var id [16]byte
	copy(id[:], sum[:16])
	id[6] = id[6]&0x0f | 0x80 // version 8 (custom), RFC 9562
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	return id
}

// rewritePartitions makes the agent the leader and only replica of every
// partition, with synthetic epochs.
func (a *Agent) rewritePartitions(up *upstream.Cluster, topic string, ps []kmsg.MetadataResponseTopicPartition) []kmsg.MetadataResponseTopicPartition {
	self := []int32{a.nodeID}
	for i := range ps {
		p := &ps[i]
		p.LeaderEpoch = a.epochs.get(up, topic, p.Partition, p.Leader, p.LeaderEpoch)
		if p.Leader >= 0 {
			p.Leader = a.nodeID
		}
		p.Replicas, p.ISR, p.OfflineReplicas = self, self, nil
	}
	return ps
}
