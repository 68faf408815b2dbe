package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

type instanceState struct {
	InstanceID, Status, Error string
	Ranks                     []struct {
		Rank                  int
		NodeID                string
		FirstLayer, LastLayer int
		NeedBytes             uint64
		Slice                 string
	}
}

func instancesOf(t *testing.T, p *agentProc) map[string]instanceState {
	t.Helper()
	var m map[string]instanceState
	p.mustGet(t, "/state/instances", &m)
	return m
}

func placeJSON(t *testing.T, p *agentProc, body string) instanceState {
	t.Helper()
	code, b, err := p.post("/instance", body)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("POST /instance %s = %d %s %v", body, code, b, err)
	}
	var pr struct{ Instance instanceState }
	if err := json.Unmarshal(b, &pr); err != nil {
		t.Fatal(err)
	}
	return pr.Instance
}

func waitReadyRanks(t *testing.T, p *agentProc, in instanceState) map[int]runnerState {
	t.Helper()
	out := map[int]runnerState{}
	for _, rk := range in.Ranks {
		out[rk.Rank] = waitRunner(t, p, fmt.Sprintf("%s-%d", in.InstanceID, rk.Rank), "Ready", 90*time.Second)
	}
	return out
}

func deleteInstance(t *testing.T, p *agentProc, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, "http://"+p.addr+"/instance/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE %s: %v %v", id, resp, err)
	}
	resp.Body.Close()
}

// One model across three real agents: the model only on C, shards cut
// there and received by A and B over the peer link (progress in state),
// greedy output identical to one rank (for a mixture of experts too), the
// trace with every rank on the master; kill -9 of rank 1 mid-stream; a
// node leaving.
func TestPipelineProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (a model over three agents): runs in make test")
	}
	bin := buildBinary(t)
	env := []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()}
	lb := t.TempDir()
	extra := []string{"--loopback-dir", lb, "--trace-merge-timeout", "2s", "--runner-threads", "1"}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	modelID := genModel(t, bin, dirs[2], "split-test", "--preset", "small")
	var ps []*agentProc
	for _, d := range dirs {
		ps = append(ps, startAgentEnv(t, bin, testutil.FreeAddr(t), d, append(env, "HOME="+d), extra...))
	}
	for _, p := range ps {
		waitHealthy(t, p)
	}
	pollAll(t, ps, 10*time.Second, "one master and 3 members", func() (bool, string) { return agreed(t, ps, 3) })
	ids := make([]string, 3)
	for i, p := range ps {
		p.mustGet(t, "/node_id", &ids[i])
	}
	a, b, c := ps[0], ps[1], ps[2]
	poll(t, a, 20*time.Second, "C's model in A's /v1/models", func() (bool, string) {
		_, body, _ := a.get("/v1/models")
		return strings.Contains(string(body), ids[2]), string(body)
	})

	// Previews, asked of A (which lacks the model): 1, 2 and 3 nodes.
	var pv struct {
		Layers   int
		Previews []struct {
			Nodes int
			Fits  bool
			Error string
			Ranks []struct {
				NodeID                string
				FirstLayer, LastLayer int
				NeedBytes             uint64
			}
		}
	}
	poll(t, a, 10*time.Second, "previews over 3 nodes", func() (bool, string) {
		a.mustGet(t, "/instance/previews?model="+modelID, &pv)
		return pv.Layers == 8 && len(pv.Previews) == 3, fmt.Sprintf("%+v", pv)
	})
	for _, p := range pv.Previews {
		next := 0
		for _, r := range p.Ranks {
			if r.FirstLayer != next || r.LastLayer <= r.FirstLayer || r.NeedBytes == 0 {
				t.Errorf("preview of %d nodes: %+v", p.Nodes, p.Ranks)
			}
			next = r.LastLayer
		}
		if !p.Fits || next != 8 || len(p.Ranks) != p.Nodes {
			t.Errorf("preview of %d nodes: fits %v (%s), covers %d layers", p.Nodes, p.Fits, p.Error, next)
		}
	}

	// The reference: the whole model on C.
	req := `{"model":"` + modelID + `","messages":[{"role":"user","content":"hello cluster"}],"max_tokens":16,"temperature":0,"ignore_eos":true}`
	one := placeJSON(t, a, `{"model":"`+modelID+`","node":"`+ids[2]+`"}`)
	waitReadyRanks(t, a, one)
	code, _, ref := chat(t, a, req)
	if code != http.StatusOK || ref.Usage.CompletionTokens != 16 {
		t.Fatalf("one rank: %d %+v", code, ref)
	}
	// Logprobs, computed by the last rank (here the only one).
	lpReq := `{"model":"` + modelID + `","prompt":"hello cluster","max_tokens":8,"temperature":0,"ignore_eos":true,"logprobs":4}`
	lpRef := legacyComplete(t, a, lpReq)
	deleteInstance(t, a, one.InstanceID)

	// Three ranks, one per node, asked of A.
	var idx struct {
		LastEventAppliedIdx int64 `json:"lastEventAppliedIdx"`
	}
	a.mustGet(t, "/healthz", &idx)
	three := placeJSON(t, a, fmt.Sprintf(`{"model":"%s","nodes":["%s","%s","%s"]}`, modelID, ids[0], ids[1], ids[2]))
	if len(three.Ranks) != 3 || three.Ranks[0].NodeID != ids[0] || three.Ranks[2].LastLayer != 8 {
		t.Fatalf("placement %+v", three)
	}
	runners := waitReadyRanks(t, b, three)
	_, events, _ := a.get(fmt.Sprintf("/events?since=%d&limit=10000", idx.LastEventAppliedIdx))
	if !strings.Contains(string(events), `"transfer":{"from":"`+ids[2]) || !strings.Contains(string(events), `"status":"Connecting"`) {
		t.Errorf("no shard transfer from C or no Connecting status in the events:\n%.3000s", events)
	}
	code, hdr, got := chat(t, b, req)
	if code != http.StatusOK || got.Choices[0].Message.Content != ref.Choices[0].Message.Content || hdr.Get("X-Orrery-Node") != ids[0] {
		t.Fatalf("3 ranks through B: %d %q (node %s), 1 rank: %q", code, got.Choices[0].Message.Content, hdr.Get("X-Orrery-Node"), ref.Choices[0].Message.Content)
	}
	// Logprobs over 3 ranks come back to rank 0 in the token frames.
	sameLogprobs(t, "3 ranks", legacyComplete(t, b, lpReq), lpRef, 2e-3)
	moeOverThree(t, bin, a, b, ids, dirs[2])
	st, _ := status(t, a)
	master := ps[0]
	for i, id := range ids {
		if id == st.MasterID {
			master = ps[i]
		}
	}
	traceID := hdr.Get("X-Orrery-Trace-Id")
	poll(t, master, 15*time.Second, "the 3-rank trace on the master", func() (bool, string) {
		code, body, _ := master.get("/v1/traces/" + traceID + "/stats")
		var s struct {
			ByRank map[string]map[string]any `json:"byRank"`
		}
		json.Unmarshal(body, &s)
		return code == 200 && len(s.ByRank) == 3 && strings.Contains(string(body), "decode/send") && strings.Contains(string(body), "decode/recv"), string(body)
	})
	_, raw, _ := master.get("/v1/traces/" + traceID + "/raw")
	if n := strings.Count(string(raw), `"ph":"s"`); n == 0 || n != strings.Count(string(raw), `"ph":"f"`) {
		t.Errorf("flows: %d starts, %d ends", n, strings.Count(string(raw), `"ph":"f"`))
	}
	// Every rank's link track carried what its send spans say.
	checkLinkTracks(t, raw, 3)
	// Rank 0's load (on A) received its shard from C: A's link from C
	// shows it.
	loadTrace := fmt.Sprintf("load-%s-r0", three.InstanceID)
	poll(t, master, 15*time.Second, "rank 0's load trace with the shard's traffic from C", func() (bool, string) {
		_, lraw, _ := master.get("/v1/traces/" + loadTrace + "/raw")
		var lt struct{ TraceEvents []chromeEvent }
		json.Unmarshal(lraw, &lt)
		var cs []string
		for _, e := range lt.TraceEvents {
			if v, _ := e.Args["MB/s"].(float64); e.Ph == "C" && strings.HasPrefix(e.Name, "link ← ") && strings.Contains(e.Name, ids[2][:8]) && v > 0 {
				return true, ""
			}
			if e.Ph == "C" || e.Ph == "X" {
				cs = append(cs, fmt.Sprintf("%s %s %.0f+%.0f %v", e.Ph, e.Name, e.Ts, e.Dur, e.Args))
			}
		}
		return false, strings.Join(cs, "\n")
	})

	// kill -9 of rank 1 mid-stream, streaming through A.
	streamTrace := killMidStream(t, a, `{"model":"`+modelID+`","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":1900,"ignore_eos":true}`, runners[1].Pid)
	poll(t, a, 10*time.Second, "the instance Failed naming rank 1", func() (bool, string) {
		in := instancesOf(t, a)[three.InstanceID]
		return in.Status == "Failed" && strings.Contains(in.Error, "rank 1") && strings.Contains(in.Error, "killed"), in.Status + " " + in.Error
	})
	for _, p := range ps {
		if p.exited() {
			t.Fatalf("agent %s exited", p.addr)
		}
	}
	poll(t, master, 15*time.Second, "the partial trace naming rank 1", func() (bool, string) {
		code, body, _ := master.get("/v1/traces/" + streamTrace)
		return code == 200 && strings.Contains(string(body), `"partial":true`) && strings.Contains(string(body), `"missingRanks":[1]`), string(body)
	})
	// The next request places afresh (on the same three nodes) and works.
	if code, _, again := chat(t, c, req); code != http.StatusOK || again.Choices[0].Message.Content != ref.Choices[0].Message.Content {
		t.Fatalf("after the failure: %d %+v", code, again)
	}
	now := instancesOf(t, a)
	var fresh instanceState
	for id, in := range now {
		if id == three.InstanceID {
			t.Errorf("the failed instance is still there: %+v", in)
		}
		fresh = in
	}
	if len(now) != 1 || fresh.Status != "Active" || len(fresh.Ranks) != 3 {
		t.Fatalf("instances after the replacement: %+v", now)
	}
	freshRunners := waitReadyRanks(t, a, fresh)

	// A node that leaves fails the instances with a rank on it, saying
	// why (the owner, A, replaces it at the next request): kill -9 B's
	// agent. Whichever comes first names the cause: a rank whose link to
	// B broke, or B leaving the cluster.
	b.cmd.Process.Kill()
	poll(t, a, 15*time.Second, "the instance failed with node B gone", func() (bool, string) {
		in := instancesOf(t, a)[fresh.InstanceID]
		why := strings.Contains(in.Error, fresh.Ranks[1].NodeID+" left the cluster") || strings.Contains(in.Error, "rank link lost")
		return in.Status == "Failed" && why, fmt.Sprintf("%+v", in)
	})
	for _, rk := range []int{0, 2} {
		pid := freshRunners[rk].Pid
		poll(t, a, 10*time.Second, fmt.Sprintf("rank %d's runner (pid %d) stopped", rk, pid), func() (bool, string) {
			return syscall.Kill(pid, 0) != nil, ""
		})
	}
	stop(t, a)
	stop(t, c)
}
