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

	"github.com/orrery-cluster/orrery/agent/pull/pulltest"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// pullBytes is what a rank's load trace says it fetched from the source.
func pullBytes(t *testing.T, p *agentProc, task string) int64 {
	t.Helper()
	var tr struct {
		TraceEvents []struct {
			Cat  string         `json:"cat"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	var n int64 = -1
	poll(t, p, 15*time.Second, "load trace "+task, func() (bool, string) {
		code, b, err := p.get("/v1/traces/" + task + "/raw")
		if err != nil || code != http.StatusOK || json.Unmarshal(b, &tr) != nil {
			return false, fmt.Sprintf("%d %.300s %v", code, b, err)
		}
		for _, e := range tr.TraceEvents {
			if e.Cat == "load/shard-pull" {
				f, _ := e.Args["bytes"].(float64)
				n = int64(f)
				return true, ""
			}
		}
		return false, fmt.Sprintf("no load/shard-pull span in %.1000s", b)
	})
	return n
}

// An hf.co model that no node has, placed over two real agents: each
// pulls only its own tensors from the hub, and greedy output matches the
// same model run whole on a third node; placed on one node, the whole
// file is pulled (a download in the state, sha256 checked).
func TestShardPullProcesses(t *testing.T) {
	bin := buildBinary(t)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	modelID := genModel(t, bin, dirs[2], "small-Q8_0", "--preset", "small")
	data, err := os.ReadFile(filepath.Join(dirs[2], "models", "small-Q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	hub := pulltest.NewHub(t)
	hub.Add("org/Small-GGUF", "small-Q8_0.gguf", data)
	const ref = "hf.co/org/Small-GGUF:Q8_0"

	key := "ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()
	extra := []string{"--loopback-dir", t.TempDir(), "--runner-threads", "1"}
	var ps []*agentProc
	for _, d := range dirs {
		env := []string{key, "HOME=" + d, "HF_ENDPOINT=" + hub.URL(), "HF_HUB_CACHE=", "HF_HOME=", "OLLAMA_MODELS="}
		ps = append(ps, startAgentEnv(t, bin, testutil.FreeAddr(t), d, env, extra...))
	}
	for _, p := range ps {
		waitHealthy(t, p)
	}
	pollAll(t, ps, 10*time.Second, "one master and 3 members", func() (bool, string) { return agreed(t, ps, 3) })
	ids := make([]string, 3)
	for i, p := range ps {
		p.mustGet(t, "/node_id", &ids[i])
	}
	a := ps[0]
	// A knows every node, and C's model, before it places on them.
	poll(t, a, 20*time.Second, "every node and C's model in A's state", func() (bool, string) {
		var idents map[string]any
		a.mustGet(t, "/state/nodeIdentities", &idents)
		_, body, _ := a.get("/v1/models")
		return len(idents) == 3 && strings.Contains(string(body), modelID), fmt.Sprintf("%d identities; %s", len(idents), body)
	})

	// The reference: the model whole, from C's disk.
	one := placeJSON(t, a, `{"model":"`+modelID+`","node":"`+ids[2]+`"}`)
	waitReadyRanks(t, a, one)
	body := func(m string) string {
		return `{"model":"` + m + `","messages":[{"role":"user","content":"hello hub"}],"max_tokens":16,"temperature":0,"ignore_eos":true}`
	}
	code, _, want := chat(t, a, body(modelID))
	if code != http.StatusOK || want.Usage.CompletionTokens != 16 {
		t.Fatalf("reference: %d %+v", code, want)
	}
	deleteInstance(t, a, one.InstanceID)

	// Over A and B, which lack it: each pulls its own tensors.
	served := hub.Served.Load()
	two := placeJSON(t, a, `{"model":"`+ref+`","nodes":["`+ids[0]+`","`+ids[1]+`"]}`)
	waitReadyRanks(t, a, two)
	code, _, got := chat(t, a, body(ref))
	if code != http.StatusOK || got.Choices[0].Message.Content != want.Choices[0].Message.Content {
		t.Fatalf("pulled shards: %d %q, the whole model: %q", code, got.Choices[0].Message.Content, want.Choices[0].Message.Content)
	}
	var sum int64
	for _, rk := range two.Ranks {
		n := pullBytes(t, a, fmt.Sprintf("load-%s-r%d", two.InstanceID, rk.Rank))
		t.Logf("rank %d (blocks [%d, %d)) on %.8s fetched %d bytes of the model's %d (%.0f%%)", rk.Rank, rk.FirstLayer, rk.LastLayer,
			rk.NodeID, n, len(data), 100*float64(n)/float64(len(data)))
		if n <= 0 || n >= int64(len(data))*3/4 {
			t.Errorf("rank %d fetched %d bytes of %d", rk.Rank, n, len(data))
		}
		sum += n
	}
	// Besides the ranks' pulls, the placement read the header.
	total := hub.Served.Load() - served
	t.Logf("the hub served %d bytes: %d to the ranks, %d for the placement's header read", total, sum, total-sum)
	if total-sum <= 0 || total-sum > 1<<20 {
		t.Errorf("the hub served %d bytes, the ranks say %d", total, sum)
	}
	for _, d := range dirs[:2] {
		if _, err := os.Stat(filepath.Join(d, ".cache", "huggingface", "hub", "models--org--Small-GGUF")); !os.IsNotExist(err) {
			t.Errorf("a node with a shard has the model's repo in its cache: %v", err)
		}
	}
	deleteInstance(t, a, two.InstanceID)

	// On B alone: B pulls the whole file into its HF cache, verified.
	whole := placeJSON(t, a, `{"model":"`+ref+`","node":"`+ids[1]+`"}`)
	waitReadyRanks(t, a, whole)
	if code, _, got := chat(t, a, body(ref)); code != http.StatusOK || got.Choices[0].Message.Content != want.Choices[0].Message.Content {
		t.Fatalf("whole pull: %d %+v", code, got)
	}
	var downloads map[string]struct{ NodeID, Ref, Status string }
	a.mustGet(t, "/state/downloads", &downloads)
	found := false
	for _, d := range downloads {
		found = found || d.NodeID == ids[1] && d.Ref == ref && d.Status == "Done"
	}
	snap := filepath.Join(dirs[1], ".cache", "huggingface", "hub", "models--org--Small-GGUF", "snapshots", pulltest.Commit, "small-Q8_0.gguf")
	if b, err := os.ReadFile(snap); !found || err != nil || len(b) != len(data) {
		t.Fatalf("whole pull: download done %v in %+v; %s: %d bytes, %v", found, downloads, snap, len(b), err)
	}
	if !strings.Contains(string(mustBody(t, a, "/v1/models")), "org/Small-GGUF/small-Q8_0") {
		t.Error("the pulled model is not listed")
	}

	// Deleted from B through A: refused while the instance uses it, then
	// gone from B's cache and from the lists.
	rm := func() (string, error) {
		out, err := exec.Command(bin, "models", "rm", "--api", "http://"+a.addr, "--node", ids[1], "org/Small-GGUF/small-Q8_0").CombinedOutput()
		return string(out), err
	}
	if out, err := rm(); err == nil || !strings.Contains(out, "delete the instance first") {
		t.Fatalf("models rm while an instance uses it: %v %s", err, out)
	}
	deleteInstance(t, a, whole.InstanceID)
	if out, err := rm(); err != nil || !strings.Contains(out, fmt.Sprintf("from node %s: 2 files", ids[1])) {
		t.Fatalf("models rm: %v %s", err, out)
	}
	blobs, _ := os.ReadDir(filepath.Join(dirs[1], ".cache", "huggingface", "hub", "models--org--Small-GGUF", "blobs"))
	if _, err := os.Lstat(snap); !os.IsNotExist(err) || len(blobs) != 0 {
		t.Fatalf("after models rm: %s %v, blobs %v", snap, err, blobs)
	}
	poll(t, a, 15*time.Second, "the deleted model gone from /v1/models", func() (bool, string) {
		b := mustBody(t, a, "/v1/models")
		return !strings.Contains(string(b), "org/Small-GGUF/small-Q8_0"), string(b)
	})
}

func mustBody(t *testing.T, p *agentProc, path string) []byte {
	t.Helper()
	code, b, err := p.get(path)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, code, err)
	}
	return b
}
