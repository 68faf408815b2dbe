package runner

import (
	"slices"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Prompt lookup drafts what followed the latest earlier occurrence of the
// longest matching suffix (3 tokens down to 1), at most k tokens.
func TestNgramDraft(t *testing.T) {
	for _, tc := range []struct {
		hist []int32
		k    int
		want []int32
	}{
		{[]int32{1, 2, 3, 4, 5, 1, 2, 3}, 2, []int32{4, 5}},
		{[]int32{1, 2, 3, 4, 5, 1, 2, 3}, 9, []int32{4, 5, 1, 2, 3}},
		// The latest occurrence wins: after "7 8", 9 then (later) 6.
		{[]int32{7, 8, 9, 0, 7, 8, 6, 0, 7, 8}, 1, []int32{6}},
		// No 3- or 2-gram repeats; the 1-gram 5 does.
		{[]int32{5, 1, 2, 9, 5}, 3, []int32{1, 2, 9}},
		{[]int32{1, 2, 3}, 4, nil},
		{[]int32{1, 1}, 4, []int32{1}},
		{[]int32{1, 2, 1, 2}, 0, nil},
		{nil, 3, nil},
	} {
		if got := ngramDraft(tc.hist, tc.k); !slices.Equal(got, tc.want) {
			t.Errorf("ngramDraft(%v, %d) = %v, want %v", tc.hist, tc.k, got, tc.want)
		}
	}
}

func TestDraftThreads(t *testing.T) {
	for _, c := range []struct {
		set, target int
		weights     uint64
		want        int
	}{
		{0, 8, 3 << 20, 1},                        // the KJV draft: one thread
		{0, 8, runnerapi.SmallDraftBytes, 1},      // at the limit
		{0, 8, runnerapi.SmallDraftBytes + 1, 8},  // larger: the target's
		{3, 8, 3 << 20, 3},                        // asked for
		{2, 8, runnerapi.SmallDraftBytes << 4, 2}, // asked for
		{0, 1, runnerapi.SmallDraftBytes << 4, 1}, // a 1-thread target
	} {
		if got := draftThreads(c.set, c.target, c.weights); got != c.want {
			t.Errorf("draftThreads(%d, %d, %d) = %d, want %d", c.set, c.target, c.weights, got, c.want)
		}
	}
}
