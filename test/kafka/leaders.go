package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// MoveLeader moves the leader of topic/p when every replica is in sync: it
// puts a follower first in the replica list (AlterPartitionAssignments; no
// data moves), waits until the reassignment is done, elects the preferred
// leader, and waits until metadata shows the new leader. It returns 1 when
// the leader moved, 0 when the partition was not fully in sync.
//
// Electing leaders back to back without waiting for the ISR breaks the Java
// producer directly against Kafka 4.4, without the agent: it retried
// OUT_OF_ORDER_SEQUENCE_NUMBER until delivery.timeout.ms (1 run in 5),
// and once stored a record twice. That tests Kafka, not the agent.
func MoveLeader(ctx context.Context, adm *kadm.Client, topic string, p int32) (int, error) {
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return 0, err
	}
	pd, ok := md.Topics[topic].Partitions[p]
	if !ok || pd.Err != nil {
		return 0, fmt.Errorf("metadata for %s/%d: %v", topic, p, pd.Err)
	}
	if len(pd.ISR) != len(pd.Replicas) {
		return 0, nil // not fully in sync: next round
	}
	next := int32(-1)
	for _, r := range pd.Replicas {
		if r != pd.Leader {
			next = r
			break
		}
	}
	if next < 0 {
		return 0, fmt.Errorf("%s/%d has replicas %v and leader %d: nowhere to move", topic, p, pd.Replicas, pd.Leader)
	}
	order := []int32{next}
	for _, r := range pd.Replicas {
		if r != next {
			order = append(order, r)
		}
	}
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, p, order)
	resps, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("AlterPartitionAssignments: %w", err)
	}
	for _, ps := range resps {
		for _, r := range ps {
			if r.Err != nil {
				return 0, fmt.Errorf("AlterPartitionAssignments %s/%d: %w", r.Topic, r.Partition, r.Err)
			}
		}
	}
	set := kadm.TopicsSet{}
	set.Add(topic, p)
	// The order change moves no data; wait until it is done.
	if err := PollUntil(ctx, 30*time.Second, func() error {
		l, err := adm.ListPartitionReassignments(ctx, set)
		if err != nil {
			return err
		}
		for _, ps := range l {
			for _, r := range ps {
				if len(r.AddingReplicas) > 0 || len(r.RemovingReplicas) > 0 {
					return fmt.Errorf("%s/%d still reassigning", r.Topic, r.Partition)
				}
			}
		}
		return nil
	}); err != nil {
		return 0, err
	}
	res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil {
		return 0, fmt.Errorf("ElectLeaders: %w", err)
	}
	if r, ok := res[topic][p]; ok && r.Err != nil {
		return 0, fmt.Errorf("ElectLeaders %s/%d: %w", topic, p, r.Err)
	}
	err = PollUntil(ctx, 30*time.Second, func() error {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return err
		}
		if l := md.Topics[topic].Partitions[p].Leader; l != next {
			return fmt.Errorf("%s/%d: leader %d, want %d", topic, p, l, next)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// PollUntil polls cond every 50 ms until it returns nil, ctx ends or limit
// passes.
func PollUntil(ctx context.Context, limit time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %v", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
