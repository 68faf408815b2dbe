package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/placement"
	"github.com/orrery-cluster/orrery/engine/split"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// A model placed as one tensor-parallel group over two real agents: the
// model only on B, A's slice cut there and received over the peer link,
// the ranks linked through the agents; greedy output identical to the
// whole model on one rank. Refusals name their reason, and a killed rank
// fails the instance.
func TestTensorParallelInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (a tensor-parallel group over two agents): runs in make test")
	}
	bin := buildBinary(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	modelID := genModel(t, bin, dirs[1], "tp-test", "--preset", "small")
	ps, ids := loopbackCluster(t, bin, dirs, nil)
	a, b := ps[0], ps[1]
	poll(t, a, 20*time.Second, "B's model in A's /v1/models", func() (bool, string) {
		_, body, _ := a.get("/v1/models")
		return strings.Contains(string(body), ids[1]), string(body)
	})

	req := `{"model":"` + modelID + `","messages":[{"role":"user","content":"hello group"}],"max_tokens":16,"temperature":0,"ignore_eos":true}`
	one := placeJSON(t, a, `{"model":"`+modelID+`","node":"`+ids[1]+`"}`)
	waitReadyRanks(t, a, one)
	lpReq := `{"model":"` + modelID + `","prompt":"hello group","max_tokens":24,"temperature":0,"ignore_eos":true,"logprobs":2}`
	ref := legacyComplete(t, a, lpReq)
	deleteInstance(t, a, one.InstanceID)

	for _, c := range []struct{ body, says string }{
		{`"parallelism":"auto","node":"` + ids[0] + `"`, "not ranks or one node"},
		{`"parallelism":{"tensor":3}`, "tensor 3 (3 ranks) on a cluster of 2 nodes"},
		{`"parallelism":{"pipeline":2,"tensor":2}`, "pipeline 2 × tensor 2 (4 ranks) on a cluster of 2 nodes"},
		{`"parallelism":"tensor","node":"` + ids[0] + `"`, "not ranks or one node"},
	} {
		code, body, _ := a.post("/instance", `{"model":"`+modelID+`",`+c.body+`}`)
		if code != http.StatusBadRequest || !strings.Contains(string(body), c.says) {
			t.Errorf("placement with %s: %d %s, want 400 saying %q", c.body, code, body, c.says)
		}
	}

	code, body, err := a.post("/instance", fmt.Sprintf(`{"model":"%s","nodes":["%s","%s"],"parallelism":"tensor"}`, modelID, ids[0], ids[1]))
	if err != nil || code != http.StatusCreated {
		t.Fatalf("tensor-parallel placement: %d %s %v", code, body, err)
	}
	var pr struct {
		Instance struct {
			instanceState
			Tensor int
		}
	}
	if err := json.Unmarshal(body, &pr); err != nil {
		t.Fatal(err)
	}
	in := pr.Instance
	if in.Tensor != 2 || len(in.Ranks) != 2 || in.Ranks[0].NodeID != ids[0] || in.Ranks[1].LastLayer != 8 || in.Ranks[0].FirstLayer != 0 {
		t.Fatalf("placement %+v: want 2 ranks of all 8 blocks, tensor 2", in)
	}
	runners := waitReadyRanks(t, b, in.instanceState)
	sentBefore := linkBytes(t, a, ids[0], ids[1])
	code, hdr, answer := chat(t, b, req)
	if code != http.StatusOK || answer.Usage.CompletionTokens != 16 || hdr.Get("X-Orrery-Node") != ids[0] {
		t.Fatalf("tensor 2 through B: %d %+v (node %s)", code, answer, hdr.Get("X-Orrery-Node"))
	}
	// Its trace holds both ranks' passes: rank 1's compute and
	// all-reduces too, and its link track to rank 0.
	checkGroupTrace(t, ps, hdr.Get("X-Orrery-Trace-Id"), ids)
	agreeUpToNearTie(t, "tensor 2", legacyComplete(t, b, lpReq), ref, 0.05)
	// Rank 1 (on B) linked to rank 0 (on A) directly, over TLS under the
	// instance's link secret, not through the agents.
	if log := runnerLog(t, dirs[1], in.InstanceID, 1); !strings.Contains(log, "direct rank link") {
		t.Errorf("rank 1 did not link directly:\n%.3000s", log)
	}
	if !strings.Contains(a.stderr.String(), "tpRanks=2") {
		t.Errorf("A's log does not show its slice received or cut:\n%.4000s", a.stderr.String())
	}
	// The direct link's bytes count in A's traffic to B (the node's
	// per-peer figures), though no agent carried them: the 40 tokens'
	// passes each sent B 16 rows of the hidden state (2 all-reduces of 8
	// blocks), and more; the rest of A's traffic to B is a few KB.
	minBytes := uint64(40 * 16 * model.Presets["small"].Dim * 4)
	poll(t, a, 20*time.Second, "A's traffic to B counting the direct link", func() (bool, string) {
		sent := linkBytes(t, a, ids[0], ids[1])
		return sent >= sentBefore+minBytes, fmt.Sprintf("A→B %d bytes, %d before the requests: want %d more", sent, sentBefore, minBytes)
	})
	// Rank 0 keeps what it measured: the decode and the group's mean
	// all-reduce, which the cost model calibrates with.
	poll(t, a, 10*time.Second, "rank 0's measured decode and all-reduce", func() (bool, string) {
		r, ok := runnerOf(t, a, in.InstanceID+"-0")
		return ok && r.DecodeTokPerSec > 0 && r.ReduceMicros > 0 && r.ReduceMicros < 1e6, fmt.Sprintf("%+v", r)
	})

	// kill -9 of rank 1: rank 0 notices at its next step and the
	// instance fails, naming the rank.
	if err := syscall.Kill(runners[1].Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	chat(t, a, req)
	poll(t, a, 20*time.Second, "the instance Failed", func() (bool, string) {
		st := instancesOf(t, a)[in.InstanceID]
		return st.Status == "Failed" && strings.Contains(st.Error, "rank 1"), fmt.Sprintf("%+v", st)
	})
	// The next request replaces it as it was placed: a group of 2 on the
	// same nodes, not a pipeline.
	if code, _, again := chat(t, a, req); code != http.StatusOK || again.Choices[0].Message.Content != answer.Choices[0].Message.Content {
		t.Fatalf("after the failure: %d %+v, want %q", code, again, answer.Choices[0].Message.Content)
	}
	var st struct {
		Instances map[string]struct {
			Tensor int
			Ranks  []struct{ NodeID string }
		}
	}
	a.mustGet(t, "/state", &st)
	if len(st.Instances) != 1 {
		t.Fatalf("instances after the replacement: %+v", st.Instances)
	}
	for id, fresh := range st.Instances {
		if id == in.InstanceID || fresh.Tensor != 2 || len(fresh.Ranks) != 2 || fresh.Ranks[0].NodeID != ids[0] {
			t.Errorf("the replacement %s: %+v, want a new group of 2 on A and B", id, fresh)
		}
	}
}

// checkGroupTrace checks that trace traceID, on the cluster's master,
// holds decode compute and all-reduce spans of each rank of a 2-rank
// tensor-parallel group on nodes ids, and each rank's link track to the
// other.
func checkGroupTrace(t *testing.T, ps []*agentProc, traceID string, ids []string) {
	t.Helper()
	st, _ := status(t, ps[0])
	master := ps[slices.Index(ids, st.MasterID)]
	poll(t, master, 20*time.Second, "both ranks' spans in the trace", func() (bool, string) {
		code, body, _ := master.get("/v1/traces/" + traceID + "/stats")
		var s struct {
			ByRank map[string]struct {
				ByCategory map[string]struct{ Count int } `json:"byCategory"`
			} `json:"byRank"`
		}
		json.Unmarshal(body, &s)
		for r := range 2 {
			c := s.ByRank[fmt.Sprint(r)].ByCategory
			if c["decode/compute"].Count == 0 || c["decode/comms"].Count == 0 {
				return false, fmt.Sprintf("rank %d: %s", r, body)
			}
		}
		return code == 200, string(body)
	})
	tracks := linkTracks(t, master, traceID)
	for _, pair := range [][2]int{{0, 1}, {1, 0}} {
		if want := fmt.Sprintf("%s → %.8s", ids[pair[0]], ids[pair[1]]); !tracks[want] {
			t.Errorf("no link track from rank %d to rank %d (%q) among %v", pair[0], pair[1], want, tracks)
		}
	}
}

// linkTracks is trace traceID's link tracks on the master, each as
// "<sender's node id> → <the first 8 characters of the receiver's>".
func linkTracks(t *testing.T, master *agentProc, traceID string) map[string]bool {
	t.Helper()
	_, body, _ := master.get("/v1/traces/" + traceID + "/raw")
	var raw struct {
		TraceEvents []struct {
			Name, Ph string
			Pid      int
			Args     map[string]any
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	node, tracks := map[int]string{}, map[string]bool{}
	for _, e := range raw.TraceEvents {
		if e.Name == "process_name" && e.Ph == "M" {
			node[e.Pid], _ = e.Args["nodeId"].(string)
		}
	}
	for _, e := range raw.TraceEvents {
		if e.Ph == "C" && strings.HasPrefix(e.Name, "link → ") {
			to := strings.TrimSuffix(e.Name[strings.LastIndex(e.Name, "(")+1:], ")")
			tracks[fmt.Sprintf("%s → %.8s", node[e.Pid], to)] = true
		}
	}
	return tracks
}

// linkBytes is the bytes node from has sent to node to, in p's state.
func linkBytes(t *testing.T, p *agentProc, from, to string) uint64 {
	t.Helper()
	var st struct {
		NodeLinkTelemetry map[string]struct {
			Links []struct {
				Peer      string
				BytesSent uint64
			}
		}
	}
	p.mustGet(t, "/state", &st)
	for _, l := range st.NodeLinkTelemetry[from].Links {
		if l.Peer == to {
			return l.BytesSent
		}
	}
	return 0
}

// agreeUpToNearTie checks that a greedy completion gives want's tokens,
// with logprobs within 0.05, until the first token that differs, where
// the two tokens were within tieGap of each other in want's logprobs: a
// near-tie that another order of summation (and the f16 KV cache's
// rounding of it) may flip.
func agreeUpToNearTie(t *testing.T, what string, got, want legacyCompletion, tieGap float64) {
	t.Helper()
	g, w := got.Choices[0].Logprobs, want.Choices[0].Logprobs
	if g == nil || w == nil || len(g.Tokens) != len(w.Tokens) {
		t.Fatalf("%s: logprobs %+v, want %+v", what, g, w)
	}
	for i := range w.Tokens {
		if g.Tokens[i] == w.Tokens[i] {
			if d := g.TokenLogprobs[i] - w.TokenLogprobs[i]; d > 0.05 || d < -0.05 {
				t.Fatalf("%s: token %d %q: logprob %v, want %v", what, i, w.Tokens[i], g.TokenLogprobs[i], w.TokenLogprobs[i])
			}
			continue
		}
		alt, ok := w.TopLogprobs[i][g.Tokens[i]]
		gap := w.TokenLogprobs[i] - alt
		if !ok || gap > tieGap {
			t.Fatalf("%s: token %d is %q, want %q (%v; %q had %v in want's top, ok %v): not a near-tie", what, i, g.Tokens[i], w.Tokens[i],
				w.TokenLogprobs[i], g.Tokens[i], alt, ok)
		}
		t.Logf("%s: the same %d tokens, then a near-tie (%q vs %q, %.4f apart)", what, i, g.Tokens[i], w.Tokens[i], gap)
		return
	}
	t.Logf("%s: the same %d tokens", what, len(w.Tokens))
}

// A mixture of experts that fits neither node alone (each agent reports
// less RAM than one rank of the whole model needs) is refused on one node
// and runs split by experts over both: each rank holds about half, and its
// greedy output is the pipeline's over the same two nodes, up to a
// near-tie.
func TestExpertParallelFitsNoSingleNode(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (a mixture of experts over two agents): runs in make test")
	}
	bin := buildBinary(t)
	dirs := []string{t.TempDir(), t.TempDir()}
	modelID := genModel(t, bin, dirs[1], "ep-test", "--preset", "small", "--arch", "qwen3moe")
	f, err := gguf.ReadFile(filepath.Join(dirs[1], "models", modelID+".gguf"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	// The agents' defaults: the model's context, 4 slots.
	l := placement.LayoutOf(f, cfg, 0, 4)
	plan, err := split.PlanTP(f, cfg, 2)
	if err != nil {
		t.Fatal(err)
	}
	big := []placement.Node{{ID: "a", Available: 1 << 40}, {ID: "b", Available: 1 << 40}}
	ranks, err := placement.Tensor(l, plan, big)
	if err != nil {
		t.Fatal(err)
	}
	whole, rank0 := l.Need(0, l.Layers), ranks[0].Need
	// A limit between what one node and what rank 0 need.
	limitMiB := (whole + rank0) / 2 >> 20
	if limitMiB<<20 <= rank0 || limitMiB<<20 >= whole {
		t.Fatalf("no room between rank 0's %d and the whole model's %d bytes", rank0, whole)
	}
	t.Logf("whole model needs %.0f MiB, a tensor-parallel rank %.0f and %.0f; each node offers %d", float64(whole)/(1<<20),
		float64(ranks[0].Need)/(1<<20), float64(ranks[1].Need)/(1<<20), limitMiB)

	ps, ids := loopbackCluster(t, bin, dirs, func(int) []string {
		return []string{"--ram-limit-mib", fmt.Sprint(limitMiB), "--speed", "off"}
	})
	a := ps[0]
	poll(t, a, 20*time.Second, "B's model in A's /v1/models", func() (bool, string) {
		_, body, _ := a.get("/v1/models")
		return strings.Contains(string(body), modelID), string(body)
	})
	code, body, _ := a.post("/instance", `{"model":"`+modelID+`","node":"`+ids[1]+`"}`)
	if code == http.StatusCreated || !strings.Contains(string(body), "available") {
		t.Fatalf("one node: %d %s, want a refusal naming the memory", code, body)
	}

	lpReq := `{"model":"` + modelID + `","prompt":"too big for one","max_tokens":16,"temperature":0,"ignore_eos":true,"logprobs":2}`
	pipe := placeJSON(t, a, fmt.Sprintf(`{"model":"%s","nodes":["%s","%s"]}`, modelID, ids[0], ids[1]))
	waitReadyRanks(t, a, pipe)
	ref := legacyComplete(t, a, lpReq)
	deleteInstance(t, a, pipe.InstanceID)

	in := placeJSON(t, a, fmt.Sprintf(`{"model":"%s","nodes":["%s","%s"],"parallelism":"tensor"}`, modelID, ids[0], ids[1]))
	if len(in.Ranks) != 2 || in.Ranks[0].FirstLayer != 0 || in.Ranks[1].LastLayer != cfg.Layers {
		t.Fatalf("placement %+v: want 2 ranks of every block", in)
	}
	// The instance says what each rank holds, and what it needs.
	for i, r := range in.Ranks {
		if r.Slice != plan[i].String() || r.NeedBytes != ranks[i].Need || !strings.Contains(r.Slice, "every expert's columns") {
			t.Errorf("rank %d: slice %q, need %d; want %q, %d", i, r.Slice, r.NeedBytes, plan[i].String(), ranks[i].Need)
		}
	}
	waitReadyRanks(t, a, in)
	agreeUpToNearTie(t, "split by experts", legacyComplete(t, a, lpReq), ref, 0.05)
}

// runnerLog is the log of rank's runner of instance, on the agent whose
// data dir is dir.
func runnerLog(t *testing.T, dir, instance string, rank int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "logs", fmt.Sprintf("runner-%s-%d.log", instance, rank)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// loopbackCluster starts an agent on each data dir (one cluster key,
// loopback discovery, runners on one thread, and extra(i)'s flags on
// agent i), waits until they agree on a master, and returns them with
// their node ids.
func loopbackCluster(t *testing.T, bin string, dirs []string, extra func(i int) []string) ([]*agentProc, []string) {
	t.Helper()
	env := []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()}
	lb := t.TempDir()
	var ps []*agentProc
	for i, d := range dirs {
		flags := []string{"--loopback-dir", lb, "--runner-threads", "1"}
		if extra != nil {
			flags = append(flags, extra(i)...)
		}
		ps = append(ps, startAgentEnv(t, bin, testutil.FreeAddr(t), d, append(env, "HOME="+d), flags...))
	}
	for _, p := range ps {
		waitHealthy(t, p)
	}
	n := len(ps)
	pollAll(t, ps, time.Duration(n)*5*time.Second, fmt.Sprintf("one master and %d members", n), func() (bool, string) { return agreed(t, ps, n) })
	ids := make([]string, n)
	for i, p := range ps {
		p.mustGet(t, "/node_id", &ids[i])
	}
	// Members agree before every identity is in every node's state, and a
	// placement naming a node checks the state (CI once placed too soon:
	// "node … is not a member of this cluster").
	pollAll(t, ps, time.Duration(n)*5*time.Second, "every node's identity in every state", func() (bool, string) {
		for _, p := range ps {
			var st struct {
				NodeIdentities map[string]json.RawMessage `json:"nodeIdentities"`
			}
			code, b, err := p.get("/state")
			if err != nil || code != 200 {
				return false, fmt.Sprintf("GET /state: %d %v", code, err)
			}
			if err := json.Unmarshal(b, &st); err != nil {
				return false, err.Error()
			}
			for _, id := range ids {
				if _, ok := st.NodeIdentities[id]; !ok {
					return false, fmt.Sprintf("%s's state lacks %s", p.addr, id)
				}
			}
		}
		return true, ""
	})
	return ps, ids
}
