package rollout

import (
	"slices"
	"strings"
	"testing"

	"github.com/baton-kafka/baton/migration"
)

// TestSelectWave: a wave moves exactly the PROXY topics whose writer
// namespaces are all in it or in earlier waves; everything else stays,
// with why.
func TestSelectWave(t *testing.T) {
	t.Parallel()
	p := migration.Proxy
	topics := []WaveTopic{
		{Name: "t-ab", State: p, Writers: []string{"b", "a"}},
		{Name: "t-a", State: p, Writers: []string{"a", "a"}},
		{Name: "t-b", State: p, Writers: []string{"b"}},
		{Name: "t-none", State: p},
		{Name: "t-done", State: migration.Complete, Writers: []string{"a"}},
		{Name: "t-parked", State: migration.Reject, Writers: []string{"a"}},
		{Name: "t-unlabelled", State: p, Writers: []string{""}},
	}
	for _, tc := range []struct {
		name           string
		earlier, wave  []string
		move           []string
		stayed, reason map[string]string
	}{
		{name: "first wave a", wave: []string{"a"}, move: []string{"t-a"}, stayed: map[string]string{
			"t-ab": "also written from b, in no wave yet", "t-b": "also written from b", "t-none": "no agent reported writing it",
			"t-done": "COMPLETE, not PROXY", "t-parked": "REJECT, not PROXY", "t-unlabelled": "(no namespace)"}},
		{name: "wave b after a", earlier: []string{"a"}, wave: []string{"b"}, move: []string{"t-a", "t-ab", "t-b"},
			stayed: map[string]string{"t-none": "no agent", "t-done": "COMPLETE", "t-parked": "REJECT", "t-unlabelled": "(no namespace)"}},
		{name: "one wave of both", wave: []string{"b", "a"}, move: []string{"t-a", "t-ab", "t-b"},
			stayed: map[string]string{"t-none": "no agent", "t-done": "COMPLETE", "t-parked": "REJECT", "t-unlabelled": "(no namespace)"}},
		{name: "wave b alone", wave: []string{"b"}, move: []string{"t-b"},
			stayed: map[string]string{"t-a": "also written from a", "t-ab": "also written from a", "t-none": "no agent",
				"t-done": "COMPLETE", "t-parked": "REJECT", "t-unlabelled": "(no namespace)"}},
		{name: "a namespace no topic is written from", wave: []string{"c"}, move: []string{},
			stayed: map[string]string{"t-a": "also written from a", "t-ab": "also written from a, b", "t-b": "also written from b",
				"t-none": "no agent", "t-done": "COMPLETE", "t-parked": "REJECT", "t-unlabelled": "(no namespace)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sel := SelectWave(topics, tc.earlier, tc.wave)
			if !slices.Equal(sel.Move, tc.move) {
				t.Errorf("moves %v, want %v", sel.Move, tc.move)
			}
			got := map[string]string{}
			for _, s := range sel.Stay {
				got[s.Topic] = s.Reason
			}
			if len(got) != len(tc.stayed) {
				t.Errorf("stays %v, want the topics of %v", got, tc.stayed)
			}
			for topic, want := range tc.stayed {
				if !strings.Contains(got[topic], want) {
					t.Errorf("%s stays for %q, want a reason containing %q", topic, got[topic], want)
				}
			}
		})
	}
}
