package ggmlintegration

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/backend/ggml"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// logSoftmax is the reference: float64 log-softmax of a row of logits.
func logSoftmax(logits []float32) []float64 {
	m := math.Inf(-1)
	for _, l := range logits {
		m = max(m, float64(l))
	}
	sum := 0.0
	for _, l := range logits {
		sum += math.Exp(float64(l) - m)
	}
	out := make([]float64, len(logits))
	for i, l := range logits {
		out[i] = float64(l) - m - math.Log(sum)
	}
	return out
}

// The logprobs a completion reports, on 1 rank and over a pipeline of 2
// and 3 (where the last rank computes them and the token frame carries
// them to rank 0), are the log-softmax of the backend's raw logits at each
// position, with the top-n ids in order, whatever the temperature.
func TestLogprobsMatchBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("slow (1, 2 and 3 ranks on real ggml): runs in make test")
	}
	path := genModel(t, "F32")
	_, tok := tokenizerOf(t, path)
	prompt, err := tok.Encode("the cluster is a model of the world; the cluster is a model of the world; the cluster", true)
	if err != nil {
		t.Fatal(err)
	}
	const topN = 5
	req := runnerapi.CompletionRequest{Request: runnerapi.Request{PromptTokens: prompt, MaxTokens: 6, IgnoreEOS: true,
		Logprobs: true, TopLogprobs: topN}}
	req.Sample.Temperature, req.Sample.Seed = 0.9, 3

	// The whole model on one backend rank, for the reference logits.
	rk, err := ggml.Load(context.Background(), path, backend.Options{Threads: 2, KVType: "f32", BatchSize: 512}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rk.Close)
	check := func(name string, pieces []runnerapi.Piece) {
		t.Helper()
		if err := rk.Reset(); err != nil {
			t.Fatal(err)
		}
		var gen []runnerapi.Piece
		for _, p := range pieces {
			if p.Token >= 0 {
				gen = append(gen, p)
			}
		}
		if len(gen) != req.MaxTokens {
			t.Fatalf("%s: %d tokens, want %d", name, len(gen), req.MaxTokens)
		}
		logits := forward(t, []backend.Rank{rk}, prompt, positions(0, len(prompt)), false)
		for i, p := range gen {
			lp := p.Logprobs
			if lp == nil || lp.Token != p.Token || len(lp.Top) != topN {
				t.Fatalf("%s: token %d: logprobs %+v", name, i, lp)
			}
			want := logSoftmax(logits)
			if d := math.Abs(float64(lp.Logprob) - want[p.Token]); d > 1e-3 || lp.Logprob > 0 {
				t.Errorf("%s: token %d (%d): logprob %v, backend %v", name, i, p.Token, lp.Logprob, want[p.Token])
			}
			order := make([]int, len(want))
			for k := range order {
				order[k] = k
			}
			slices.SortStableFunc(order, func(a, b int) int {
				if want[a] > want[b] {
					return -1
				} else if want[a] < want[b] {
					return 1
				}
				return 0
			})
			for k, top := range lp.Top {
				if d := math.Abs(float64(top.Logprob) - want[top.Token]); d > 1e-3 {
					t.Errorf("%s: token %d top %d (%d): logprob %v, backend %v", name, i, k, top.Token, top.Logprob, want[top.Token])
				}
				if d := math.Abs(want[top.Token] - want[order[k]]); d > 1e-3 {
					t.Errorf("%s: token %d top %d is %d (%v), backend's is %d (%v)", name, i, k, top.Token, want[top.Token], order[k], want[order[k]])
				}
				if top.Text == "" && !tok.Special(top.Token) {
					t.Errorf("%s: token %d top %d (%d) has no text", name, i, k, top.Token)
				}
			}
			logits = forward(t, []backend.Rank{rk}, []int32{p.Token}, positions(len(prompt)+i, len(prompt)+i+1), false)
		}
	}

	_, c := newServer(t, path)
	var one []runnerapi.Piece
	if _, err := c.Complete(context.Background(), req, func(p runnerapi.Piece) error { one = append(one, p); return nil }); err != nil {
		t.Fatal(err)
	}
	check("1 rank", one)
	for _, ranges := range splits[1:] {
		p := startPipeline(t, path, ranges)
		var got []runnerapi.Piece
		if _, err := p.client.Complete(context.Background(), req, func(pc runnerapi.Piece) error { got = append(got, pc); return nil }); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("%d ranks", len(ranges)), got)
		for i := range got {
			if got[i].Token != one[i].Token {
				t.Errorf("%d ranks: token %d is %d, 1 rank's %d", len(ranges), i, got[i].Token, one[i].Token)
			}
		}
	}

	// Speculating (prompt lookup; greedy, where a random model soon loops
	// and lookup finds drafts), each verified token's logprobs come from
	// the row it was decided on: still the backend's at its position.
	// ("min" keeps drafts coming, whatever adaptive K would choose.)
	sreq := req
	sreq.MaxTokens, sreq.Speculative, sreq.Sample.Temperature = 12, &runnerapi.Speculation{Draft: "ngram", Max: 4, Min: 2}, 0
	req.MaxTokens = 12
	for _, ranges := range splits {
		var got []runnerapi.Piece
		var done *runnerapi.Done
		if len(ranges) == 1 {
			done, err = c.Complete(context.Background(), sreq, func(pc runnerapi.Piece) error { got = append(got, pc); return nil })
		} else {
			done, err = startPipeline(t, path, ranges).client.Complete(context.Background(), sreq, func(pc runnerapi.Piece) error { got = append(got, pc); return nil })
		}
		if err != nil {
			t.Fatal(err)
		}
		if done.DraftTokens == 0 {
			t.Errorf("%d ranks: nothing drafted", len(ranges))
		}
		check(fmt.Sprintf("%d ranks, speculating (%d drafted, %d accepted)", len(ranges), done.DraftTokens, done.AcceptedDraftTokens), got)
	}

	// Without logprobs asked, none come.
	req.Logprobs = false
	if _, err := c.Complete(context.Background(), req, func(p runnerapi.Piece) error {
		if p.Logprobs != nil {
			t.Errorf("piece %d has logprobs unasked", p.Index)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func positions(i, j int) []int32 {
	p := make([]int32, j-i)
	for k := range p {
		p[k] = int32(i + k)
	}
	return p
}
