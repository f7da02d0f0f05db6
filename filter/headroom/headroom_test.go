package headroom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/baton-kafka/baton/filter"
	"github.com/baton-kafka/baton/filter/headroom"
)

// destinations judges the topics it lists, at their latency.
type destinations map[string]time.Duration

func (d destinations) Destination(topic string) (time.Duration, bool) {
	l, ok := d[topic]
	return l, ok
}

// batch is one v2 record batch whose first record was produced at ts.
func batch(ts time.Time, size int) []byte {
	b := kmsg.RecordBatch{Magic: 2, FirstTimestamp: ts.UnixMilli(), MaxTimestamp: ts.UnixMilli(), ProducerID: -1, NumRecords: 1,
		Records: make([]byte, size)}
	return b.AppendTo(nil)
}

// producer drives one connection's filter as a producer would: a request
// every interval, each carrying one batch of size bytes whose records
// waited queued in the client, at most inflight requests unanswered.
type producer struct {
	topic    string
	acks     int16
	interval time.Duration
	size     int
	queued   time.Duration
	inflight int
}

func TestHeadroom(t *testing.T) {
	t.Parallel()
	const lat = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		p     producer
		raise string // "" when no warning is due
	}{
		{"one in flight, records queued in the client", producer{topic: "t", acks: -1, interval: 10 * time.Millisecond, size: 16 << 10, queued: time.Second, inflight: 1},
			headroom.RaiseInFlight},
		{"four in flight, still short, records queued", producer{topic: "t", acks: -1, interval: 10 * time.Millisecond, size: 16 << 10, queued: time.Second, inflight: 4},
			headroom.RaiseBatchSize},
		{"short on paper, but nothing waits in the client", producer{topic: "t", acks: -1, interval: 10 * time.Millisecond, size: 16 << 10, queued: 5 * time.Millisecond, inflight: 1}, ""},
		{"records queued, but the pipeline carries the rate", producer{topic: "t", acks: 1, interval: 100 * time.Millisecond, size: 16 << 10, queued: time.Second, inflight: 5}, ""},
		{"a topic not judged", producer{topic: "other", acks: -1, interval: 10 * time.Millisecond, size: 16 << 10, queued: time.Second, inflight: 1}, ""},
		{"timestamps the application set", producer{topic: "t", acks: -1, interval: 10 * time.Millisecond, size: 16 << 10, queued: time.Hour, inflight: 1}, ""},
		{"acks=0 has nothing in flight", producer{topic: "t", acks: 0, interval: 10 * time.Millisecond, size: 16 << 10, queued: time.Second, inflight: 1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := time.Unix(1_700_000_000, 0)
			var got []headroom.Warning
			f, err := headroom.New(headroom.Config{
				Topics: destinations{"t": lat},
				Report: func(w headroom.Warning) { got = append(got, w) },
				Now:    func() time.Time { return now },
			})
			if err != nil {
				t.Fatal(err)
			}
			c := f.New(filter.ConnInfo{ID: 1}).(interface {
				filter.RequestFilter
				filter.ResponseFilter
			})
			ctx := context.Background()
			client := "app-1"
			var open []*filter.Exchange
			for now.Before(time.Unix(1_700_000_000, 0).Add(headroom.DefaultWindow + time.Second)) {
				req := kmsg.NewPtrProduceRequest()
				req.Acks = tc.p.acks
				rt := kmsg.NewProduceRequestTopic()
				rt.Topic = tc.p.topic
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Records = batch(now.Add(-tc.p.queued), tc.p.size)
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
				x := &filter.Exchange{Header: filter.Header{APIKey: 0, ClientID: &client}, Req: req,
					RawReq: make([]byte, tc.p.size+100), Received: now}
				if st := c.OnRequest(ctx, x); st != filter.Continue {
					t.Fatalf("OnRequest: %v, want Continue: the filter only observes", st)
				}
				open = append(open, x)
				if len(open) >= tc.p.inflight {
					c.OnResponse(ctx, open[0])
					open = open[1:]
				}
				now = now.Add(tc.p.interval)
			}
			switch {
			case tc.raise == "" && len(got) > 0:
				t.Fatalf("warned %v; want no warning", got[0])
			case tc.raise != "" && len(got) != 1:
				t.Fatalf("%d warnings, want 1", len(got))
			case tc.raise != "":
				w := got[0]
				if w.ClientID != client || w.Topic != "t" || w.Raise != tc.raise || w.Destination != lat || w.Capacity >= w.Rate {
					t.Fatalf("warning %+v; want client %s, topic t, raise %q, capacity below rate", w, client, tc.raise)
				}
				if !strings.Contains(w.String(), "raise max.in.flight") && tc.raise == headroom.RaiseInFlight {
					t.Errorf("warning text %q does not say what to raise", w)
				}
			}
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   headroom.Config
		field string
	}{
		{headroom.Config{Report: func(headroom.Warning) {}}, "Topics"},
		{headroom.Config{Topics: destinations{}}, "Report"},
		{headroom.Config{Topics: destinations{}, Report: func(headroom.Warning) {}, Margin: 0.5}, "Margin"},
		{headroom.Config{Topics: destinations{}, Report: func(headroom.Warning) {}, Window: -time.Second}, "Window"},
	} {
		if _, err := headroom.New(tc.cfg); !errors.Is(err, headroom.ErrBadConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v; want ErrBadConfig naming %s", tc.cfg, err, tc.field)
		}
	}
}
