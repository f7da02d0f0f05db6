package agent_test

import "github.com/twmb/franz-go/pkg/kerr"

var kerrNotLeader = kerr.NotLeaderForPartition
