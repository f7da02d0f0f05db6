package replicator

import (
	"slices"
	"testing"
)

func TestHandoffKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key   string
		topic string
		part  int32
	}{
		{"handoff:orders", "orders", -1},
		{"handoff:orders:3", "orders", 3},
		{"handoff:a.b-c_d:12", "a.b-c_d", 12},
		{"handoff:orders:x", "orders:x", -1}, // not a partition: never written so
		{"handoff:orders:-1", "orders:-1", -1},
	} {
		topic, part := parseHandoffKey(tc.key)
		if topic != tc.topic || part != tc.part {
			t.Errorf("parseHandoffKey(%q) = %q, %d; want %q, %d", tc.key, topic, part, tc.topic, tc.part)
		}
	}
	if k := string(partitionHandoffKey("orders", 7)); k != "handoff:orders:7" {
		t.Errorf("partitionHandoffKey = %q", k)
	}
}

// TestMergeHandoff: a partition's record replaces that partition's entry
// of a whole topic's, or of an older partition record, and no other.
func TestMergeHandoff(t *testing.T) {
	t.Parallel()
	hs := map[string]Handoff{"t": {Topic: "t", Partitions: []HandoffPartition{{0, 10, 10}, {1, 20, 20}}}}
	mergeHandoff(hs, "t", HandoffPartition{1, 25, 25})
	mergeHandoff(hs, "t", HandoffPartition{2, 5, 5})
	mergeHandoff(hs, "u", HandoffPartition{0, 1, 1})
	got := hs["t"].Partitions
	slices.SortFunc(got, func(a, b HandoffPartition) int { return int(a.Partition - b.Partition) })
	if want := []HandoffPartition{{0, 10, 10}, {1, 25, 25}, {2, 5, 5}}; !slices.Equal(got, want) {
		t.Errorf("t: %v, want %v", got, want)
	}
	if u := hs["u"]; u.Topic != "u" || len(u.Partitions) != 1 {
		t.Errorf("u: %+v", u)
	}
}
