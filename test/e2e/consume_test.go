package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/baton-kafka/baton/test/clients"
)

// What a producer app also does on its connection must keep working
// through the agent (docs/design.md §7): consumers, consumer groups, admin.

const consumeRecords = 1000

// seeded is a topic on the source with consumeRecords keyed records,
// written directly (not through the agent), and where each one sits.
type seeded struct {
	topic string
	where map[string]tpo // key -> partition/offset
	ends  map[int32]int64
}

type tpo struct {
	p int32
	o int64
}

func seedTopic(t *testing.T, ctx context.Context, e *env, what string) seeded {
	t.Helper()
	topic := freshTopic(t, ctx, e, what, 6)
	cl := sourceClient(t, e, kgo.DefaultProduceTopic(topic), kgo.ClientID("baton-e2e-seed"))
	s := seeded{topic: topic, where: map[string]tpo{}, ends: map[int32]int64{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for i := range consumeRecords {
		key := clients.Key("seed", i)
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Key: []byte(key), Value: []byte(clients.Value("seed", i))}, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			s.where[key] = tpo{r.Partition, r.Offset}
			s.ends[r.Partition] = max(s.ends[r.Partition], r.Offset+1)
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("seeding %s on the %s source directly: %v", topic, e.name, firstErr)
	}
	return s
}

// TestConsumerGroupThroughAgent reads a topic with a franz-go consumer
// group that knows only the agent, commits, and checks the commit on the
// source.
func TestConsumerGroupThroughAgent(t *testing.T) {
	for _, l := range envs {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			e := l.get(t)
			ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
			defer cancel()
			s := seedTopic(t, ctx, e, "group")
			group := s.topic + "-group"
			cl := agentClient(t, e,
				kgo.ClientID("baton-e2e-group"),
				kgo.ConsumerGroup(group),
				kgo.ConsumeTopics(s.topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.DisableAutoCommit(),
			)
			got := map[string]tpo{}
			for len(got) < consumeRecords {
				fs := cl.PollFetches(ctx)
				if err := ctx.Err(); err != nil {
					t.Fatalf("consumer group through the agent read %d of %d records: %v", len(got), consumeRecords, err)
				}
				fs.EachError(func(topic string, p int32, err error) {
					t.Errorf("consumer group through the agent: fetching %s/%d: %v", topic, p, err)
				})
				if t.Failed() {
					t.FailNow()
				}
				fs.EachRecord(func(r *kgo.Record) {
					key := string(r.Key)
					at := tpo{r.Partition, r.Offset}
					if want, ok := s.where[key]; !ok || want != at {
						t.Errorf("consumer read key %q at %d/%d; it was written at %d/%d (known: %v)", key, at.p, at.o, want.p, want.o, ok)
					}
					if prev, dup := got[key]; dup {
						t.Errorf("consumer read key %q twice: at %d/%d and %d/%d", key, prev.p, prev.o, at.p, at.o)
					}
					got[key] = at
				})
				if t.Failed() {
					t.FailNow()
				}
			}
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Fatalf("committing through the agent: %v", err)
			}
			// The commit is the source's: read it there directly.
			committed, err := kadm.NewClient(sourceClient(t, e)).FetchOffsets(ctx, group)
			if err == nil {
				err = committed.Error()
			}
			if err != nil {
				t.Fatalf("fetching %s's offsets from the %s source: %v", group, e.name, err)
			}
			for p, end := range s.ends {
				o, ok := committed.Lookup(s.topic, p)
				if !ok || o.At != end {
					t.Errorf("group %s on the source: partition %d committed at %d (present: %v), want %d", group, p, o.At, ok, end)
				}
			}
		})
	}
}

// TestAdminThroughAgent uses kadm with only the agent as broker: end
// offsets, topic configs, topic creation.
func TestAdminThroughAgent(t *testing.T) {
	for _, l := range envs {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			e := l.get(t)
			ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
			defer cancel()
			s := seedTopic(t, ctx, e, "admin")
			adm := kadm.NewClient(agentClient(t, e, kgo.ClientID("baton-e2e-admin")))

			ends, err := adm.ListEndOffsets(ctx, s.topic)
			if err == nil {
				err = ends.Error()
			}
			if err != nil {
				t.Fatalf("ListEndOffsets through the agent: %v", err)
			}
			for p := range int32(6) {
				o, ok := ends.Lookup(s.topic, p)
				if !ok || o.Offset != s.ends[p] {
					t.Errorf("ListEndOffsets through the agent: %s/%d at %d (present: %v), want %d", s.topic, p, o.Offset, ok, s.ends[p])
				}
			}

			rcs, err := adm.DescribeTopicConfigs(ctx, s.topic)
			if err != nil {
				t.Fatalf("DescribeTopicConfigs through the agent: %v", err)
			}
			rc, err := rcs.On(s.topic, nil)
			if err == nil {
				err = rc.Err
			}
			if err != nil {
				t.Fatalf("DescribeTopicConfigs through the agent: %s: %v", s.topic, err)
			}
			found := false
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" {
					found = true
					if c.MaybeValue() != "delete" {
						t.Errorf("DescribeTopicConfigs through the agent: cleanup.policy=%q, want delete", c.MaybeValue())
					}
				}
			}
			if !found {
				t.Errorf("DescribeTopicConfigs through the agent: no cleanup.policy among %d configs", len(rc.Configs))
			}

			created := s.topic + "-created"
			resp, err := adm.CreateTopic(ctx, 3, sourceBrokers, nil, created)
			if err == nil {
				err = resp.Err
			}
			if err != nil {
				t.Fatalf("CreateTopic through the agent: %v", err)
			}
			// The topic is the source's: find it there directly.
			src := kadm.NewClient(sourceClient(t, e))
			if err := waitFor(ctx, 30*time.Second, func() error {
				md, err := src.Metadata(ctx, created)
				if err != nil {
					return err
				}
				td := md.Topics[created]
				if td.Err != nil {
					return td.Err
				}
				if len(td.Partitions) != 3 {
					return fmt.Errorf("%d partitions, want 3", len(td.Partitions))
				}
				for _, p := range td.Partitions {
					if len(p.Replicas) != sourceBrokers {
						return fmt.Errorf("partition %d has replicas %v, want %d", p.Partition, p.Replicas, sourceBrokers)
					}
				}
				return nil
			}); err != nil {
				t.Fatalf("topic %s created through the agent, on the %s source: %v", created, e.name, err)
			}
		})
	}
}

// TestKcatConsumeThroughAgent reads a whole topic with kcat -C
// (librdkafka's consumer) through the agent.
func TestKcatConsumeThroughAgent(t *testing.T) {
	for _, l := range envs {
		t.Run(l.name, func(t *testing.T) {
			t.Parallel()
			e := l.get(t)
			ctx, cancel := context.WithTimeout(t.Context(), caseTimeout)
			defer cancel()
			s := seedTopic(t, ctx, e, "kcat-consume")
			bin, err := exec.LookPath("kcat")
			if err != nil {
				t.Fatalf("kcat is not installed (make test runs test/clients/install.sh): %v", err)
			}
			cmd := exec.CommandContext(ctx, bin, "-F", "none", "-b", e.agent, "-C", "-t", s.topic, "-e", "-o", "beginning",
				"-X", "client.id=baton-e2e-kcat-consume", "-f", "%k %p %o\n")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("kcat -C through the agent: %v; stderr:\n%s", err, lastLines(stderr.String(), 30))
			}
			got := map[string]tpo{}
			sc := bufio.NewScanner(&stdout)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 3 {
					t.Fatalf("kcat printed %q, want \"key partition offset\"", sc.Text())
				}
				p, err1 := strconv.ParseInt(f[1], 10, 32)
				o, err2 := strconv.ParseInt(f[2], 10, 64)
				if err1 != nil || err2 != nil {
					t.Fatalf("kcat printed %q, want \"key partition offset\"", sc.Text())
				}
				at := tpo{int32(p), o}
				if want, ok := s.where[f[0]]; !ok || want != at {
					t.Errorf("kcat read key %q at %d/%d; it was written at %d/%d (known: %v)", f[0], at.p, at.o, want.p, want.o, ok)
				}
				if prev, dup := got[f[0]]; dup {
					t.Errorf("kcat read key %q twice: at %d/%d and %d/%d", f[0], prev.p, prev.o, at.p, at.o)
				}
				got[f[0]] = at
			}
			if len(got) != consumeRecords {
				t.Fatalf("kcat -C through the agent read %d distinct records, want %d; stderr:\n%s", len(got), consumeRecords, lastLines(stderr.String(), 30))
			}
		})
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
