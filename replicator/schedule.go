package replicator

import (
	"slices"
	"time"
)

// Candidate is one partition waiting to be copied, as the scheduler sees it.
type Candidate struct {
	Topic     string
	Partition int32
	// Lag is the partition's time lag (see Lag).
	Lag time.Duration
	// Migrating marks the partition's topic as being cut over.
	Migrating bool
}

// Schedule orders candidates for copying. It is pure: the same input gives
// the same output, and the input is not modified.
//
//  1. Partitions of a migrating topic come first: the cutover waits on them.
//  2. Then topics in shortest-job-first order: the topic whose lag (the
//     largest lag of its partitions) is least goes first, so small topics
//     are not starved behind a large backlog and reach zero lag quickly.
//  3. Within a topic, the partition with the most lag goes first (longest
//     processing time first), so the topic as a whole finishes soonest.
//
// Ties break by topic name, then partition number.
func Schedule(cands []Candidate) []Candidate {
	topicLag := map[string]time.Duration{}
	migrating := map[string]bool{}
	for _, c := range cands {
		topicLag[c.Topic] = max(topicLag[c.Topic], c.Lag)
		migrating[c.Topic] = migrating[c.Topic] || c.Migrating
	}
	out := slices.Clone(cands)
	slices.SortStableFunc(out, func(a, b Candidate) int {
		if ma, mb := migrating[a.Topic], migrating[b.Topic]; ma != mb {
			if ma {
				return -1
			}
			return 1
		}
		if a.Topic != b.Topic {
			if la, lb := topicLag[a.Topic], topicLag[b.Topic]; la != lb {
				if la < lb {
					return -1
				}
				return 1
			}
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		if a.Lag != b.Lag {
			if a.Lag > b.Lag {
				return -1
			}
			return 1
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}
