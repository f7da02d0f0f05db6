package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-kafka/baton/test/kafka"
)

// Leader-move workload: each producer paced at stallRate for moveRun; a
// partition's leader moved every moveEvery, the partitions in turn.
const (
	moveRun   = 60 * time.Second
	moveEvery = 2 * time.Second
)

// BenchmarkLeaderMoveStall: the producers of BenchmarkBrokerRestartStall
// (franz-go and the Java producer, idempotent, acks=all, one of each
// directly and one of each through a `baton agent` with the topic in PROXY)
// write one topic of a 3-broker Apache Kafka cluster while its partitions'
// leaders move by reassignment, one partition every 2 s in turn
// (kafka.MoveLeader: a follower put first in the replica list, the
// preferred leader elected, once every replica is in sync). Each
// producer's longest gap between two acks is reported, the agent's as a
// ratio to the direct one of the same client, under the same moves in the
// same run: the agent must learn of a new leader no later than a client
// writing the cluster directly (NOT_LEADER_OR_FOLLOWER, then metadata).
// Every acked record is read back at its acked offset; any failed record
// fails the benchmark.
func BenchmarkLeaderMoveStall(b *testing.B) {
	if b.N > 1 {
		b.Skip("runs a fixed workload once; use -benchtime 1x")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const topic = "leader-move-stall"
	c, adm, agentAddr := stallCluster(b, ctx, topic)
	runs := startStallRuns(b, ctx, c.Bootstrap(), agentAddr, topic, int(moveRun.Seconds())*stallRate)
	moved, skipped := 0, 0
	var moves []string // when each move began and ended, to read the stalls against
	for round := 0; stallsRunning(runs); round++ {
		time.Sleep(moveEvery)
		began := time.Now()
		n, err := kafka.MoveLeader(ctx, adm, topic, int32(round%partitions))
		if n > 0 {
			moves = append(moves, fmt.Sprintf("%s-%s p%d", began.Format("15:04:05.000"), time.Now().Format("05.000"), round%partitions))
		}
		if err != nil {
			b.Fatalf("moving the leader of %s/%d: %v", topic, round%partitions, err)
		}
		moved += n
		skipped += 1 - n
	}
	if moved == 0 {
		b.Fatal("no leader moved: the benchmark measured nothing")
	}
	b.Logf("leader moves: %s", strings.Join(moves, ", "))
	reportStalls(b, ctx, c.Bootstrap(), topic, runs,
		fmt.Sprintf("%d leader moves by reassignment (%d rounds skipped, a replica out of sync), %d records/s per producer",
			moved, skipped, stallRate))
}
