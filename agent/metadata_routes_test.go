package agent_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/agent"
	"github.com/baton-kafka/baton/migration"
)

// TestMetadataListsEachTopicFromItsRoute: the agent answers Metadata with
// each topic from the cluster it routes to, once. A request naming only
// topics that route to the source, and an all-topics request while no
// topic is COMPLETE, must not list the destination's topics: before the
// fix both asked the destination for all its topics and listed every one,
// so a topic on both clusters came twice (with the destination's partition
// count the second time) and topics only on the destination were listed
// although produce to them goes to the source. (kcat's driver in the e2e
// cutover test failed on "metadata answered 2 topics for 1".)
func TestMetadataListsEachTopicFromItsRoute(t *testing.T) {
	t.Parallel()
	f := startFixture(t, []agent.Route{
		{Topic: "proxied", State: migration.Proxy},
		{Topic: "moved", State: migration.Complete},
	})
	for _, c := range []struct {
		addr, topic string
		partitions  int32
	}{
		{f.src.Bootstrap(), "proxied", 3},
		{f.dst.Bootstrap(), "proxied", 2},
		{f.src.Bootstrap(), "moved", 3},
		{f.dst.Bootstrap(), "moved", 2},
		{f.src.Bootstrap(), "src-only", 3},
		{f.dst.Bootstrap(), "dst-only", 2},
	} {
		createTopic(t, c.addr, c.topic, c.partitions)
	}
	cl := newClient(t, f.addr)
	ask := func(topics ...string) map[string][]int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := kmsg.NewPtrMetadataRequest()
		if topics != nil {
			req.Topics = []kmsg.MetadataRequestTopic{}
		}
		for _, tp := range topics {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(tp)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("metadata %v through the agent: %v", topics, err)
		}
		got := map[string][]int{} // topic: partition count of each entry
		for _, rt := range resp.Topics {
			if rt.Topic != nil && rt.ErrorCode == 0 {
				got[*rt.Topic] = append(got[*rt.Topic], len(rt.Partitions))
			}
		}
		return got
	}
	check := func(what string, got map[string][]int, want map[string]int) {
		t.Helper()
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			w, ok := want[n]
			switch {
			case !ok:
				t.Errorf("%s: lists %s (entries with %v partitions), want it absent", what, n, got[n])
			case len(got[n]) != 1 || got[n][0] != w:
				t.Errorf("%s: lists %s with %v partitions (one entry each), want one entry with %d", what, n, got[n], w)
			}
		}
		for n, w := range want {
			if _, ok := got[n]; !ok {
				t.Errorf("%s: does not list %s, want it with %d partitions", what, n, w)
			}
		}
	}
	check("metadata for proxied", ask("proxied"), map[string]int{"proxied": 3})
	check("metadata for src-only", ask("src-only"), map[string]int{"src-only": 3})
	check("metadata for moved", ask("moved"), map[string]int{"moved": 2})
	check("metadata for proxied and moved", ask("proxied", "moved"), map[string]int{"proxied": 3, "moved": 2})
	check("metadata for all topics", ask(), map[string]int{"proxied": 3, "moved": 2, "src-only": 3})

	// No topic COMPLETE: an all-topics request lists the source's alone.
	f.agent.Routes().Replace([]agent.Route{{Topic: "proxied", State: migration.Proxy}})
	check("metadata for all topics, none COMPLETE", ask(), map[string]int{"proxied": 3, "moved": 3, "src-only": 3})
}

// TestMetadataShowsOneClusterID: through the agent a client sees one
// cluster, whichever cluster its topics route to, so the agent answers
// with one cluster id: the source's. librdkafka warns "a client must not be
// simultaneously connected to multiple clusters" when it changes.
func TestMetadataShowsOneClusterID(t *testing.T) {
	t.Parallel()
	f := startFixture(t, []agent.Route{
		{Topic: "proxied", State: migration.Proxy},
		{Topic: "moved", State: migration.Complete},
	})
	createTopic(t, f.src.Bootstrap(), "proxied", 1)
	createTopic(t, f.dst.Bootstrap(), "moved", 1)
	clusterID := func(addr string, topics ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{}
		for _, tp := range topics {
			req.Topics = append(req.Topics, kmsg.MetadataRequestTopic{Topic: kmsg.StringPtr(tp)})
		}
		resp, err := req.RequestWith(ctx, newClient(t, addr))
		if err != nil {
			t.Fatalf("metadata %v from %s: %v", topics, addr, err)
		}
		if resp.ClusterID == nil {
			t.Fatalf("metadata %v from %s: no cluster id", topics, addr)
		}
		return *resp.ClusterID
	}
	src, dst := clusterID(f.src.Bootstrap()), clusterID(f.dst.Bootstrap())
	if src == dst {
		t.Fatalf("both clusters have cluster id %q: the test cannot tell them apart", src)
	}
	for _, topics := range [][]string{{"proxied"}, {"moved"}, {"proxied", "moved"}} {
		if got := clusterID(f.addr, topics...); got != src {
			t.Errorf("metadata for %v through the agent: cluster id %q, want the source's %q (the destination's is %q)", topics, got, src, dst)
		}
	}
}
