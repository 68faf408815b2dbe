package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Pipeline 2 × tensor 2 over four real agents: stage 0 (blocks 0–3) a
// tensor-parallel group on A and B, stage 1 (blocks 4–7) one on C and D,
// the stages linked through the agents like a pipeline's ranks and each
// group's ranks like a group's. The model is only on D: the other three
// get their slices cut there. Stage 0's group links directly, stage 1's
// (its agents' --direct-links=false) through the agents. Greedy output is the whole model's on one
// rank up to a near-tie, and tensor 2's to the bit; a killed rank of
// stage 1 fails the instance, naming it.
func TestHybridInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (a model over four agents): runs in make test")
	}
	bin := buildBinary(t)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()}
	modelID := genModel(t, bin, dirs[3], "hybrid-test", "--preset", "small")
	// C and D link their group through the agents; A and B directly.
	ps, ids := loopbackCluster(t, bin, dirs, func(i int) []string {
		if i >= 2 {
			return []string{"--direct-links=false"}
		}
		return nil
	})
	a := ps[0]
	// Placement runs on D (which has the model) and names A and B: D must
	// know every identity first, as A must.
	poll(t, a, 20*time.Second, "D's model in A's /v1/models, every identity on A and D", func() (bool, string) {
		_, body, _ := a.get("/v1/models")
		return strings.Contains(string(body), ids[3]) && len(identities(t, a)) == 4 && len(identities(t, ps[3])) == 4, string(body)
	})
	lpReq := `{"model":"` + modelID + `","prompt":"hello stages","max_tokens":24,"temperature":0,"ignore_eos":true,"logprobs":2}`
	one := placeJSON(t, a, `{"model":"`+modelID+`","node":"`+ids[3]+`"}`)
	waitReadyRanks(t, a, one)
	ref := legacyComplete(t, a, lpReq)
	deleteInstance(t, a, one.InstanceID)
	// Tensor 2 on A and B: the same slices of every block, so the hybrid
	// must give its tokens and logprobs to the bit (only the hidden
	// state, in f32, crosses the stages).
	tp := placeJSON(t, a, fmt.Sprintf(`{"model":"%s","nodes":["%s","%s"],"parallelism":"tensor"}`, modelID, ids[0], ids[1]))
	waitReadyRanks(t, a, tp)
	tpRef := legacyComplete(t, a, lpReq)
	deleteInstance(t, a, tp.InstanceID)

	in := placeJSON(t, a, fmt.Sprintf(`{"model":"%s","nodes":["%s","%s","%s","%s"],"parallelism":{"pipeline":2,"tensor":2}}`,
		modelID, ids[0], ids[1], ids[2], ids[3]))
	for i, r := range in.Ranks {
		first, last := 0, 4
		if i >= 2 {
			first, last = 4, 8
		}
		if r.Rank != i || r.NodeID != ids[i] || r.FirstLayer != first || r.LastLayer != last {
			t.Fatalf("rank %d: %+v, want node %d with blocks [%d, %d)", i, r, i, first, last)
		}
	}
	runners := waitReadyRanks(t, a, in)
	got := legacyComplete(t, ps[2], lpReq)
	agreeUpToNearTie(t, "pipeline 2 × tensor 2", got, ref, 0.05)
	if g, w := got.Choices[0].Logprobs, tpRef.Choices[0].Logprobs; !slices.Equal(g.Tokens, w.Tokens) || !slices.Equal(g.TokenLogprobs, w.TokenLogprobs) {
		t.Errorf("pipeline 2 × tensor 2 gave %q %v, tensor 2 %q %v: want the same bits", g.Tokens, g.TokenLogprobs, w.Tokens, w.TokenLogprobs)
	}
	if !strings.Contains(runnerLog(t, dirs[1], in.InstanceID, 1), "direct rank link") ||
		strings.Contains(runnerLog(t, dirs[3], in.InstanceID, 3), "direct rank link") {
		t.Error("stage 0's group should link directly, stage 1's (--direct-links=false) through the agents")
	}
	// Each rank loaded a slice of its stage's blocks: the runners say so.
	for i, p := range ps {
		if !strings.Contains(p.stderr.String(), "tpRanks=2") {
			t.Errorf("agent %d's log does not show a slice cut or received:\n%.3000s", i, p.stderr.String())
		}
	}

	// A traced request: every rank records its steps, with its group's
	// all-reduces, and the stages' leaders their sends and receives.
	code, hdr, _ := chat(t, a, `{"model":"`+modelID+`","messages":[{"role":"user","content":"trace me"}],"max_tokens":8,"temperature":0}`)
	if code != 200 {
		t.Fatalf("chat: %d", code)
	}
	st, _ := status(t, a)
	master := ps[slices.Index(ids, st.MasterID)]
	traceID := hdr.Get("X-Orrery-Trace-Id")
	poll(t, master, 20*time.Second, "the trace of all 4 ranks on the master", func() (bool, string) {
		code, body, _ := master.get("/v1/traces/" + traceID + "/stats")
		var s struct {
			ByRank map[string]struct {
				ByCategory map[string]any `json:"byCategory"`
			} `json:"byRank"`
		}
		json.Unmarshal(body, &s)
		for r := range 4 {
			if _, ok := s.ByRank[fmt.Sprint(r)].ByCategory["decode/comms"]; !ok {
				return false, fmt.Sprintf("rank %d has no decode/comms: %s", r, body)
			}
		}
		return code == 200 && len(s.ByRank) == 4 && strings.Contains(string(body), "decode/send") && strings.Contains(string(body), "decode/recv"), string(body)
	})

	// Its link tracks: each rank's to its group's other rank, and each
	// leader's to the next stage's leader (rank 0 → 1 and → 2, 1 → 0,
	// rank 2 → 3 and → 0, 3 → 2), each on the sender's process, named by
	// the receiver ("<name> (<id>)").
	tracks := linkTracks(t, master, traceID)
	for _, pair := range [][2]int{{0, 1}, {0, 2}, {1, 0}, {2, 3}, {2, 0}, {3, 2}} {
		from, to := ids[pair[0]], ids[pair[1]]
		if want := fmt.Sprintf("%s → %.8s", from, to); !tracks[want] {
			t.Errorf("no link track from rank %d to rank %d (%q) among %v", pair[0], pair[1], want, tracks)
		}
	}

	if err := syscall.Kill(runners[3].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.post("/v1/completions", lpReq) // rank 0 notices at its next step
	poll(t, a, 20*time.Second, "the instance Failed, naming rank 3", func() (bool, string) {
		st := instancesOf(t, a)[in.InstanceID]
		return st.Status == "Failed" && strings.Contains(st.Error, "rank 3"), fmt.Sprintf("%+v", st)
	})
}
