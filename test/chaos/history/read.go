package history

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Read returns every record of each topic on the cluster at bootstrap, from
// each partition's start to the end offset it has when Read begins, read
// uncommitted (whatever a producer wrote, committed or not, counts). A topic
// the cluster does not have reads as empty.
func Read(ctx context.Context, bootstrap []string, topics []string) (map[string][]Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.ClientID("baton-chaos-history"),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("history: listing end offsets: %w", err)
	}
	out := map[string][]Record{}
	want := map[string]map[int32]kgo.Offset{}
	left := map[string]map[int32]int64{}
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			// UNKNOWN_TOPIC_OR_PARTITION: the cluster never got the topic.
			return
		}
		if o.Offset <= 0 {
			return
		}
		if want[o.Topic] == nil {
			want[o.Topic], left[o.Topic] = map[int32]kgo.Offset{}, map[int32]int64{}
		}
		want[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		left[o.Topic][o.Partition] = o.Offset
	})
	for _, t := range topics {
		out[t] = nil
	}
	if len(want) == 0 {
		return out, nil
	}
	cl.AddConsumePartitions(want)
	pending := 0
	for _, ps := range left {
		pending += len(ps)
	}
	for pending > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("history: reading back (%d partitions short of their end): %w", pending, err)
		}
		fs.EachError(func(t string, p int32, e error) {
			if ferr == nil {
				ferr = fmt.Errorf("history: reading %s/%d: %w", t, p, e)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			out[r.Topic] = append(out[r.Topic], Record{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)})
			if r.Offset == end-1 {
				delete(left[r.Topic], r.Partition)
				pending--
			}
		})
		if ferr != nil {
			return nil, ferr
		}
	}
	return out, nil
}
