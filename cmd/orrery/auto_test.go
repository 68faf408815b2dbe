package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// measuredSpeed runs `orrery speed` once (one thread, as the runners
// here) and returns the file the agents take with --speed.
func measuredSpeed(t *testing.T, bin string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command(bin, "speed", "--json", "--threads", "1", "--dir", dir).Output()
	if err != nil {
		t.Fatalf("orrery speed: %v", err)
	}
	var sp runnerapi.Speed
	if err := json.Unmarshal(out, &sp); err != nil {
		t.Fatalf("orrery speed --json: %v: %s", err, out)
	}
	if err := sp.Check(); err != nil || sp.Types["Q8_0"].DecodeBytesPerSec <= 0 || sp.ReduceMicros <= 0 || sp.HopMicros <= 0 {
		t.Fatalf("speed %+v: %v", sp, err)
	}
	path := filepath.Join(dir, "speed.json")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// "parallelism": "auto" over two agents 1 ms apart each way (the delay
// proxy): every plan is predicted from the measured speed and links, the
// tensor group pays the 1 ms on each of its 16 all-reduces, and auto
// places the plan predicted fastest: one node when free to, a pipeline
// over the two nodes named. The instance keeps its prediction, which the
// test sets beside the decode it measures.
func TestAutoPicksFromLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (two agents through delay proxies, every plan run): runs in make test")
	}
	bin := buildBinary(t)
	speedFile := measuredSpeed(t, bin)
	a, b, _, _ := delayedPair(t, bin, time.Millisecond, "--runner-threads", "1", "--speed", speedFile)
	var ida, idb string
	a.mustGet(t, "/node_id", &ida)
	b.mustGet(t, "/node_id", &idb)
	type linkState struct {
		NodeIdentities    map[string]struct{ Speed *runnerapi.Speed }
		NodeLinkTelemetry map[string]struct {
			Links []struct {
				Peer     string
				RTTMinMs float64
				Probes   int
			}
		}
	}
	// oneWays is the sum of half of each direction's smallest round trip.
	oneWays := func(st linkState) (ms float64) {
		for _, pair := range [][2]string{{ida, idb}, {idb, ida}} {
			for _, l := range st.NodeLinkTelemetry[pair[0]].Links {
				if l.Peer == pair[1] {
					ms += l.RTTMinMs / 2
				}
			}
		}
		return ms
	}
	var before linkState
	poll(t, a, 30*time.Second, "both speeds and both links (≥ 2 ms round trips) in the state", func() (bool, string) {
		var st linkState
		a.mustGet(t, "/state", &st)
		before = st
		for _, pair := range [][2]string{{ida, idb}, {idb, ida}} {
			if st.NodeIdentities[pair[0]].Speed == nil {
				return false, "no speed of " + pair[0]
			}
			ok := false
			for _, l := range st.NodeLinkTelemetry[pair[0]].Links {
				ok = ok || l.Peer == pair[1] && l.Probes > 0 && l.RTTMinMs >= 2
			}
			if !ok {
				return false, fmt.Sprintf("no link %s→%s yet: %+v", pair[0], pair[1], st.NodeLinkTelemetry[pair[0]])
			}
		}
		return true, ""
	})
	var pv struct {
		Plans []runnerapi.Prediction
		Auto  string
	}
	a.mustGet(t, "/instance/previews?model=delay-test", &pv)
	var after linkState
	a.mustGet(t, "/state", &after)
	plans := map[string]runnerapi.Prediction{}
	for _, p := range pv.Plans {
		plans[p.Plan] = p
		t.Logf("predicted %-10s on %v: decode %.1f tok/s (%.2f ms, of which %.2f ms messages), prefill of %d tokens %.0f tok/s %v",
			p.Plan, p.Nodes, p.DecodeTokPerSec, p.DecodeMs, p.CommMs, p.PrefillTokens, p.PrefillTokPerSec, p.Assumed)
	}
	for _, name := range []string{"one node", "pipeline 2", "tensor 2"} {
		if p := plans[name]; !p.Fits || p.DecodeMs <= 0 || p.PrefillMs <= 0 {
			t.Fatalf("plan %q: %+v (plans %+v)", name, p, pv.Plans)
		}
	}
	// 16 all-reduces, each at least one 1 ms crossing; 2 hops for the
	// pipeline.
	if c := plans["tensor 2"].CommMs; c < 16 {
		t.Errorf("tensor 2 spends %.2f ms per token on messages, want ≥ 16 (16 all-reduces over 1 ms)", c)
	}
	// The pipeline: 2 hops, each 1 ms or more of link, two agent hops of
	// the measured software and one row's bytes (these agents share a
	// loaded machine, so the software is what it measured, not a bound).
	// A smallest round trip only shrinks: the state read before the
	// previews bounds what they used from above, the one after from below.
	hop := 2 * before.NodeIdentities[idb].Speed.HopMicros / 1e3
	if sp := before.NodeIdentities[ida].Speed; sp.HopMicros != before.NodeIdentities[idb].Speed.HopMicros {
		t.Fatalf("both agents took one speed file, yet their hops differ: %v", sp.HopMicros)
	}
	row := 512 * 4 / 1.25e8 * 1e3 // the small preset's row over an estimated 1 Gbit/s at most
	lo, hi := 2*hop+oneWays(after), 2*hop+oneWays(before)+2*row
	if c := plans["pipeline 2"].CommMs; c < 2 || c < lo*0.999 || c > hi*1.001 {
		t.Errorf("pipeline 2 spends %.3f ms per token on messages, want 2 crossings of ≥ 1 ms and their software: %.3f..%.3f", c, lo, hi)
	}
	if pv.Auto != "one node" {
		t.Errorf("previews say auto would place %q, want one node (1 ms links, a model that fits)", pv.Auto)
	}
	// A plan that names one node or ranks is not auto's to choose.
	if code, body, _ := a.post("/instance", fmt.Sprintf(`{"model":"delay-test","node":"%s","parallelism":"auto"}`, ida)); code != http.StatusBadRequest || !strings.Contains(string(body), "auto") {
		t.Errorf("auto on one named node: %d %s", code, body)
	}
	code, body, err := a.post("/instance", fmt.Sprintf(`{"model":"delay-test","nodes":["%s","%s"],"parallelism":"auto"}`, ida, idb))
	if err != nil || code != http.StatusCreated {
		t.Fatalf("place auto: %d %s %v", code, body, err)
	}
	var placed struct {
		Instance struct {
			instanceState
			Tensor     int
			Prediction *runnerapi.Prediction
		}
	}
	if err := json.Unmarshal(body, &placed); err != nil {
		t.Fatal(err)
	}
	in := placed.Instance
	if len(in.Ranks) != 2 || in.Tensor != 0 || in.Prediction == nil || in.Prediction.Plan != "pipeline 2" {
		t.Fatalf("auto over two named nodes 1 ms apart placed %+v, want the pipeline with its prediction", in)
	}
	waitReadyRanks(t, a, in.instanceState)
	req := `{"model":"delay-test","messages":[{"role":"user","content":"hi"}],"max_tokens":65,"temperature":0,"ignore_eos":true}`
	chat(t, a, req) // warm up
	var best float64
	for range 2 {
		code, _, ans := chat(t, a, req)
		if code != http.StatusOK || ans.Usage.CompletionTokens != 65 {
			t.Fatalf("chat: %d %+v", code, ans)
		}
		best = max(best, ans.orreryDecode())
	}
	t.Logf("pipeline 2, 1 ms each way (agents sharing this machine's cores): predicted %.1f tok/s, measured %.1f (%.0f %%)",
		in.Prediction.DecodeTokPerSec, best, 100*best/in.Prediction.DecodeTokPerSec)
	// Rank 0 keeps its measured decode beside the prediction (a pipeline
	// has no all-reduce).
	r, ok := runnerOf(t, a, in.InstanceID+"-0")
	if !ok || r.DecodeTokPerSec <= 0 || r.ReduceMicros != 0 {
		t.Errorf("rank 0 after the chats: %+v", r)
	}
}
