package shadow

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-kafka/baton/internal/wait"
	"github.com/baton-kafka/baton/migration"
	"github.com/baton-kafka/baton/replicator"
)

// TestProxyWatchStopsWhenTopicLeavesProxy: a bypass watch whose start
// (the source's end offsets) cannot be read yet retries every second. Once
// the topic leaves PROXY the watch is dropped, and its goroutine must stop
// with it, not retry until the job stops (one more for every time the
// topic comes back to PROXY).
func TestProxyWatchStopsWhenTopicLeavesProxy(t *testing.T) {
	t.Parallel()
	f := &fakes{endsErr: errors.New("not ready")}
	j := newTestJob(t, f, 0)
	j.NoteStates(map[string]migration.State{"t": migration.Proxy})
	j.syncProxyWatches(j.proxySpansNow())
	wait.For(t, 10*time.Second, "the watch of t reads the source's end offsets", func() string {
		if f.calls("t") == 0 {
			return "no read yet"
		}
		return ""
	})
	j.NoteStates(map[string]migration.State{"t": migration.Reject})
	j.syncProxyWatches(j.proxySpansNow())
	stopped := make(chan struct{})
	go func() { j.wg.Wait(); close(stopped) }()
	wait.For(t, 10*time.Second, "the dropped watch's goroutine ends", func() string {
		select {
		case <-stopped:
			return ""
		default:
			return fmt.Sprintf("it still retries: %d reads so far", f.calls("t"))
		}
	})
	if st := j.WatchState("t"); st.Watching {
		t.Errorf("t left PROXY, yet it is watched: %+v", st)
	}
}

// TestProxyWatchStartsOverWhenTopicComesBack: a topic leaves PROXY and is
// added again at once, sooner than the bypass loop's next sync. What was
// written to its source while it was not managed (offsets 30 to 40, by a
// producer no agent knows) is from before the new PROXY span: the watch
// must start over from the source's ends then, not judge those records a
// forgotten producer's and refuse the cutover.
func TestProxyWatchStartsOverWhenTopicComesBack(t *testing.T) {
	t.Parallel()
	f := &fakes{ends: map[int32]int64{0: 30}}
	j := newTestJob(t, f, 0)
	watchReadyAt := func(start int64) func() string {
		return func() string {
			j.syncProxyWatches(j.proxySpansNow())
			j.byp.mu.Lock()
			defer j.byp.mu.Unlock()
			w := j.byp.proxy["t"]
			if w != nil && w.ready && w.parts[0] != nil && w.parts[0].start == start {
				return ""
			}
			return "not yet"
		}
	}
	j.NoteStates(map[string]migration.State{"t": migration.Proxy})
	wait.For(t, 30*time.Second, "the watch of t starts at offset 30", watchReadyAt(30))
	j.NoteStates(map[string]migration.State{}) // removed
	f.mu.Lock()
	f.ends = map[int32]int64{0: 40}
	f.mu.Unlock()
	j.NoteStates(map[string]migration.State{"t": migration.Proxy}) // added again
	wait.For(t, 30*time.Second, "the watch of t starts over at offset 40", watchReadyAt(40))
	now := time.Now()
	j.NoteSourceRead(replicator.SourceRead{Topic: "t", Partition: 0, BaseOffset: 30, End: 40, ProducerID: 7,
		Seen: now, At: now})
	j.judge(now.Add(j.Grace()+time.Hour), nil)
	if at, what, ok := j.LastBypass("t"); ok {
		t.Fatalf("records written while t was not managed were judged a forgotten producer's (%s, at %v)", what, at)
	}
}
