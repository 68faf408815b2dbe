package runner

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/model"
)

func meshPair(t *testing.T) [2]*collective.Mesh {
	t.Helper()
	var lns [2]net.Listener
	addrs := make([]string, 2)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
		t.Cleanup(func() { ln.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ms [2]*collective.Mesh
	var errs [2]error
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { ms[r], errs[r] = collective.Connect(ctx, r, 2, addrs, lns[r], "t") })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ms[r].Close)
	}
	return ms
}

// tileBoth runs checkTiling on both ranks of ms at once, with slices
// s[0] and s[1], and returns each rank's answer.
func tileBoth(ms [2]*collective.Mesh, s [2]model.TPSlice, vocab int) []error {
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { errs[r] = checkTiling(ms[r], &s[r], vocab) })
	}
	wg.Wait()
	return errs
}

// Slices that tile the model pass; slices of two plans (rank 1's MLP
// columns overlapping rank 0's) are refused on both ranks, naming a
// column.
func TestCheckTiling(t *testing.T) {
	full := model.TPSlice{Ranks: 2, FullHeads: 8, FullKVHeads: 4, FullFF: 256}
	s0, s1 := full, full
	s0.Heads, s0.KVHeads, s0.FFDim = 4, 2, 96
	s1.Rank, s1.Head, s1.Heads, s1.KVHead, s1.KVHeads, s1.FF, s1.FFDim = 1, 4, 4, 2, 2, 96, 160
	for _, c := range []struct {
		name   string
		ff1    int
		wantOK bool
	}{{"tiled", 96, true}, {"overlapping", 64, false}} {
		t.Run(c.name, func(t *testing.T) {
			ms := meshPair(t)
			b := s1
			b.FF, b.FFDim = c.ff1, 256-c.ff1
			errs := tileBoth(ms, [2]model.TPSlice{s0, b}, 0)
			for r, err := range errs {
				if c.wantOK && err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				if !c.wantOK && (err == nil || !strings.Contains(err.Error(), "MLP column 64")) {
					t.Errorf("rank %d: %v, want a refusal naming MLP column 64", r, err)
				}
			}
		})
	}
}

// Experts tile as columns do: a rank 1 cut for another expert split (its
// first expert also rank 0's) is refused, naming the expert.
func TestCheckTilingExperts(t *testing.T) {
	full := model.TPSlice{Ranks: 2, FullHeads: 8, FullKVHeads: 4, FullFF: 256, FFDim: 256, FullExperts: 8}
	s0, s1 := full, full
	s0.Heads, s0.KVHeads, s0.Experts = 4, 2, 4
	s1.Rank, s1.Head, s1.Heads, s1.KVHead, s1.KVHeads = 1, 4, 4, 2, 2
	for _, c := range []struct {
		first  int
		wantOK bool
	}{{4, true}, {3, false}} {
		ms := meshPair(t)
		b := s1
		b.Expert, b.Experts = c.first, 8-c.first
		errs := tileBoth(ms, [2]model.TPSlice{s0, b}, 0)
		for r, err := range errs {
			if c.wantOK != (err == nil) || err != nil && !strings.Contains(err.Error(), "expert 3 is held by 2 ranks") {
				t.Errorf("rank 1's experts from %d: rank %d: %v (want ok %v)", c.first, r, err, c.wantOK)
			}
		}
	}
}

// The output head's rows tile too: split (each row on one rank) or whole
// (on rank 0, no rows in the slices) passes; rows on two ranks, or a
// split on one rank only, is refused naming a row.
func TestCheckTilingVocab(t *testing.T) {
	full := model.TPSlice{Ranks: 2, FullHeads: 8, FullKVHeads: 4, FullFF: 256, Heads: 4, KVHeads: 2, FFDim: 128}
	s0, s1 := full, full
	s1.Rank, s1.Head, s1.KVHead, s1.FF = 1, 4, 2, 128
	for _, c := range []struct {
		v0, v1 [2]int // first and rows of each rank
		says   string
	}{
		{[2]int{0, 64}, [2]int{64, 64}, ""},
		{[2]int{0, 0}, [2]int{0, 0}, ""},
		{[2]int{0, 64}, [2]int{32, 96}, "row 32 of the output head is held by 2 ranks"},
		{[2]int{0, 64}, [2]int{0, 0}, "row 64 of the output head is held by 0 ranks"},
	} {
		ms := meshPair(t)
		a, b := s0, s1
		a.VocabFirst, a.VocabRows = c.v0[0], c.v0[1]
		b.VocabFirst, b.VocabRows = c.v1[0], c.v1[1]
		errs := tileBoth(ms, [2]model.TPSlice{a, b}, 128)
		for r, err := range errs {
			if c.says == "" && err != nil || c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)) {
				t.Errorf("head rows %v and %v: rank %d: %v, want %q", c.v0, c.v1, r, err, c.says)
			}
		}
	}
}

// deepseek2's slices tile its dense blocks' and shared experts' columns
// too (experts whole); a shared column on no rank is refused, naming it.
func TestCheckTilingLatent(t *testing.T) {
	full := model.TPSlice{Ranks: 2, FullHeads: 8, FullKVHeads: 1, KVHeads: 1, FullFF: 256, FullExperts: 8, FullSharedFF: 64}
	s0, s1 := full, full
	s0.Heads, s0.FFDim, s0.Experts, s0.SharedFF = 4, 128, 4, 32
	s1.Rank, s1.Head, s1.Heads, s1.FF, s1.FFDim, s1.Expert, s1.Experts, s1.Shared, s1.SharedFF = 1, 4, 4, 128, 128, 4, 4, 32, 32
	for _, c := range []struct {
		shared [2]int
		says   string
	}{{[2]int{32, 32}, ""}, {[2]int{40, 24}, "shared experts' column 32 is held by 0 ranks"}} {
		ms := meshPair(t)
		b := s1
		b.Shared, b.SharedFF = c.shared[0], c.shared[1]
		for r, err := range tileBoth(ms, [2]model.TPSlice{s0, b}, 0) {
			if c.says == "" && err != nil || c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)) {
				t.Errorf("rank 1's shared columns %v: rank %d: %v, want %q", c.shared, r, err, c.says)
			}
		}
	}
	// Dense MLP columns on both ranks: refused.
	ms := meshPair(t)
	b := s1
	b.FF = 64
	for r, err := range tileBoth(ms, [2]model.TPSlice{s0, b}, 0) {
		if err == nil || !strings.Contains(err.Error(), "dense MLP column 64 is held by 2 ranks") {
			t.Errorf("overlapping dense columns: rank %d: %v", r, err)
		}
	}
}
