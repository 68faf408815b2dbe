package runner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// reducer is a rank's slice as a fake: each pass all-reduces one row per
// block over the group's mesh, as a real slice does.
type reducer struct {
	mesh   *collective.Mesh
	blocks int
}

func (r *reducer) Config() model.Config     { return model.Config{Vocab: 4} }
func (r *reducer) Options() backend.Options { return backend.Options{Parallel: 2} }
func (r *reducer) Forward(ctx context.Context, b backend.Batch) (backend.Result, error) {
	for range r.blocks {
		if err := r.mesh.AllReduce(make([]float32, 8*len(b.Positions))); err != nil {
			return backend.Result{}, err
		}
	}
	return backend.Result{Logits: make([]float32, 4*max(len(b.Outputs), 1))}, nil
}
func (r *reducer) Remove(seq, from int) error         { return nil }
func (r *reducer) Shift(seq, keep, discard int) error { return nil }

// A follower traces the slots the leader says are traced, and only
// those: each pass as a decode or prefill span holding its compute and
// its all-reduces, with their bytes, handed over when the slot's trace
// ends; a malformed trace message ends the follower with a clear error.
func TestFollowerTraces(t *testing.T) {
	ms := meshPair(t)
	leader := &TPLeader{F: &reducer{ms[0], 3}, Mesh: ms[0]}
	type got struct {
		id    string
		spans []trace.Span
	}
	var mu sync.Mutex
	var traces []got
	f := &TPFollower{F: &reducer{ms[1], 3}, Mesh: ms[1], Rank: 1, Node: "b",
		OnTrace: func(id string, spans []trace.Span, _ []trace.CounterSample, err error) {
			mu.Lock()
			traces = append(traces, got{id, spans})
			mu.Unlock()
		}}
	served := make(chan error, 1)
	ctx := t.Context()
	go func() { served <- f.Serve(ctx) }()

	// Slot 1 traced, slot 0 not: a prefill of 3 rows of slot 1 beside one
	// of slot 0, then two decode steps of both.
	if err := traceSlot(leader, 1, "t-one"); err != nil {
		t.Fatal(err)
	}
	steps := []backend.Batch{
		{Tokens: []int32{1, 2, 3, 4}, Positions: []int32{0, 1, 2, 0}, Seqs: []int{1, 1, 1, 0}, Outputs: []int32{2, 3}},
		{Tokens: []int32{5, 6}, Positions: []int32{3, 1}, Seqs: []int{1, 0}, Outputs: []int32{0, 1}},
		{Tokens: []int32{7, 8}, Positions: []int32{4, 2}, Seqs: []int{1, 0}, Outputs: []int32{0, 1}},
	}
	for _, b := range steps {
		if _, err := leader.Forward(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := traceSlot(leader, 1, ""); err != nil {
		t.Fatal(err)
	}
	traceSlot(leader, 0, "") // never traced: nothing sent
	// One more pass: the follower handled every message before it.
	if _, err := leader.Forward(ctx, steps[1]); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(traces) != 1 || traces[0].id != "t-one" {
		t.Fatalf("traces handed over: %+v, want one, t-one", traces)
	}
	count := map[string]int{}
	var reduceBytes int64
	for _, s := range traces[0].spans {
		count[s.Cat+" "+s.Name]++
		if s.Rank != 1 || s.Node != "b" {
			t.Errorf("span %+v: want rank 1 on b", s)
		}
		if s.Name == "all-reduce" {
			reduceBytes += s.Args.Bytes
		}
	}
	want := map[string]int{"prefill prefill 3 rows": 1, "decode token step": 2, "prefill/compute compute": 1, "decode/compute compute": 2,
		"prefill/comms all-reduce": 3, "decode/comms all-reduce": 6}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d spans %q, want %d (all: %v)", count[k], k, n, count)
		}
	}
	if len(count) != len(want) {
		t.Errorf("spans %v, want only %v", count, want)
	}
	// Every all-reduce sent its row to the one other rank: 4 rows of 8
	// values in the prefill, 2 in each decode step, 3 blocks each.
	if wantBytes := int64(3 * (4 + 2 + 2) * 8 * 4); reduceBytes != wantBytes {
		t.Errorf("all-reduce spans carry %d bytes, want %d", reduceBytes, wantBytes)
	}

	// A trace message for a slot the follower does not have.
	bad := append([]byte{tpTrace}, 9, 0, 0, 0)
	if err := ms[0].Send(append(bad, "x"...)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "a trace for slot 9 of 2") {
			t.Errorf("follower ended with %v, want a trace for slot 9 of 2", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follower kept running after a malformed trace message")
	}
}
