package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// gpuAgents starts a loopback cluster of agents, agent i with flags[i]
// (its GPU controls), once the model gen made (with its flags) is on the
// last one and listed on the first. It returns the agents, their node ids
// and the model's id.
func gpuAgents(t *testing.T, flags [][]string, gen ...string) ([]*agentProc, []string, string) {
	t.Helper()
	needGPU(t)
	bin := buildBinary(t)
	dirs := make([]string, len(flags))
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	modelID := genModel(t, bin, dirs[len(dirs)-1], "gpu-test", gen...)
	ps, ids := loopbackCluster(t, bin, dirs, func(i int) []string { return flags[i] })
	poll(t, ps[0], 20*time.Second, "the model in A's /v1/models", func() (bool, string) {
		_, body, _ := ps[0].get("/v1/models")
		return strings.Contains(string(body), modelID), string(body)
	})
	return ps, ids, modelID
}

// A pipeline of a Vulkan rank and a CPU rank over two real agents, one
// with --gpu-software (its runners on lavapipe), one with --gpu off (its
// runners on the CPU whatever an instance asks, "gpuLayers": "auto"
// included): hidden states out of a GPU rank into a CPU one, and out of a
// CPU rank into a GPU one holding the head; then the same two agents as
// a tensor-parallel group, a Vulkan rank summing with a CPU rank; each
// rank's offload in the state; greedy output the one-rank CPU instance's,
// up to a near-tie.
func TestGPUPipeline(t *testing.T) {
	ps, ids, modelID := gpuAgents(t, [][]string{{"--gpu-software"}, {"--gpu", "off"}}, "--preset", "small")
	a := ps[0]
	lpReq := `{"model":"` + modelID + `","prompt":"hello pipeline","max_tokens":24,"temperature":0,"ignore_eos":true,"logprobs":2}`
	one := placeJSON(t, a, `{"model":"`+modelID+`","node":"`+ids[1]+`","gpuLayers":"auto"}`)
	wantOffload(t, a, one.InstanceID, 0, false, "--gpu-layers 0")
	ref := legacyComplete(t, a, lpReq)
	deleteInstance(t, a, one.InstanceID)

	for _, order := range [][2]int{{0, 1}, {1, 0}} {
		name := map[int]string{0: "Vulkan", 1: "CPU"}
		what := fmt.Sprintf("%s rank 0, %s rank 1", name[order[0]], name[order[1]])
		in := placeJSON(t, a, fmt.Sprintf(`{"model":"%s","nodes":["%s","%s"]}`, modelID, ids[order[0]], ids[order[1]]))
		if len(in.Ranks) != 2 {
			t.Fatalf("%s: placement %+v, want 2 ranks", what, in)
		}
		for r, node := range order {
			o := wantOffload(t, a, in.InstanceID, r, node == 0, "--gpu-layers 0")
			if node == 0 && o.Head != (r == 1) {
				t.Errorf("%s: rank %d's head on the GPU: %v, want %v (only the last rank holds it)", what, r, o.Head, r == 1)
			}
		}
		agreeUpToNearTie(t, what, legacyComplete(t, a, lpReq), ref, 0.05)
		deleteInstance(t, a, in.InstanceID)
	}

	code, body, err := a.post("/instance", fmt.Sprintf(`{"model":"%s","nodes":["%s","%s"],"parallelism":"tensor"}`, modelID, ids[0], ids[1]))
	var pr struct {
		Instance struct {
			instanceState
			Tensor int
		}
	}
	if err != nil || code != http.StatusCreated || json.Unmarshal(body, &pr) != nil || pr.Instance.Tensor != 2 {
		t.Fatalf("a tensor group over the two agents: %d %s %v", code, body, err)
	}
	in := pr.Instance.instanceState
	wantOffload(t, a, in.InstanceID, 0, true, "")
	wantOffload(t, a, in.InstanceID, 1, false, "--gpu-layers 0")
	agreeUpToNearTie(t, "a tensor group of a Vulkan rank and a CPU rank", legacyComplete(t, a, lpReq), ref, 0.05)
	deleteInstance(t, a, in.InstanceID)
}

// A tensor-parallel group of two Vulkan ranks over two agents, each with
// --gpu-software: every block's all-reduce crosses from the device to the
// host and back (allreduce.go). Greedy output is the one-rank CPU
// instance's (placed with "gpuLayers": 0 on the same agents), up to a
// near-tie; then the same group on the CPU ("gpuLayers": 0), each
// group's measured decode and all-reduce logged beside the other's.
func TestGPUTensorParallel(t *testing.T) {
	ps, ids, modelID := gpuAgents(t, [][]string{{"--gpu-software"}, {"--gpu-software"}}, "--preset", "small")
	a := ps[0]
	lpReq := `{"model":"` + modelID + `","prompt":"hello group","max_tokens":24,"temperature":0,"ignore_eos":true,"logprobs":2}`
	one := placeJSON(t, a, `{"model":"`+modelID+`","node":"`+ids[0]+`","gpuLayers":0}`)
	wantOffload(t, a, one.InstanceID, 0, false, "--gpu-layers 0")
	ref := legacyComplete(t, a, lpReq)
	deleteInstance(t, a, one.InstanceID)

	decode := `{"model":"` + modelID + `","messages":[{"role":"user","content":"hello group"}],"max_tokens":48,"temperature":0,"ignore_eos":true}`
	measured := map[string]runnerState{}
	for _, c := range []struct {
		name, gpu string
		onGPU     bool
	}{{"Vulkan", "", true}, {"CPU", `,"gpuLayers":0`, false}} {
		code, body, err := a.post("/instance", fmt.Sprintf(`{"model":"%s","nodes":["%s","%s"],"parallelism":"tensor"%s}`, modelID, ids[0], ids[1], c.gpu))
		var pr struct {
			Instance struct {
				instanceState
				Tensor int
			}
		}
		if err != nil || code != http.StatusCreated || json.Unmarshal(body, &pr) != nil || pr.Instance.Tensor != 2 {
			t.Fatalf("%s group: %d %s %v", c.name, code, body, err)
		}
		in := pr.Instance.instanceState
		for r := range 2 {
			wantOffload(t, a, in.InstanceID, r, c.onGPU, "--gpu-layers 0")
		}
		if c.onGPU {
			agreeUpToNearTie(t, "a group of two Vulkan ranks", legacyComplete(t, a, lpReq), ref, 0.05)
		}
		// Rank 0 keeps what its last request measured: a decode of 48
		// tokens (the first, a warm-up, compiles lavapipe's pipelines).
		for range 2 {
			if code, _, ans := chat(t, a, decode); code != http.StatusOK || ans.Usage.CompletionTokens != 48 {
				t.Fatalf("%s group: chat %d %+v", c.name, code, ans)
			}
		}
		poll(t, a, 10*time.Second, c.name+" rank 0's measured decode and all-reduce", func() (bool, string) {
			r, ok := runnerOf(t, a, in.InstanceID+"-0")
			measured[c.name] = r
			return ok && r.DecodeTokPerSec > 0 && r.ReduceMicros > 0, fmt.Sprintf("%+v", r)
		})
		deleteInstance(t, a, in.InstanceID)
	}
	g, cpu := measured["Vulkan"], measured["CPU"]
	t.Logf("decode of a 2-rank group of the small preset (8 blocks: 16 all-reduces a token per rank), both ranks on this machine: on lavapipe %.1f tok/s (%.1f ms a token), mean all-reduce %.0f µs; on the CPU %.1f tok/s (%.1f ms), mean all-reduce %.0f µs",
		g.DecodeTokPerSec, 1e3/g.DecodeTokPerSec, g.ReduceMicros, cpu.DecodeTokPerSec, 1e3/cpu.DecodeTokPerSec, cpu.ReduceMicros)
}

// A speculative request on a Vulkan target with a Vulkan draft (a copy of
// the model, so that its drafts are accepted): the runner's log says
// where the draft's blocks went, and the greedy answer with the draft is
// the one without.
func TestGPUSpeculative(t *testing.T) {
	ps, ids, modelID := gpuAgents(t, [][]string{{"--gpu-software"}}, "--preset", "tiny")
	p := ps[0]
	bin := buildBinary(t)
	draftID := genModel(t, bin, dataDirOf(t, p), "gpu-draft", "--preset", "tiny")
	poll(t, p, 20*time.Second, "the draft model listed", func() (bool, string) {
		_, body, _ := p.get("/v1/models")
		return strings.Contains(string(body), draftID), string(body)
	})
	in := placeJSON(t, p, `{"model":"`+modelID+`","draftModel":"`+draftID+`"}`)
	wantOffload(t, p, in.InstanceID, 0, true, "")
	if log := runnerLog(t, dataDirOf(t, p), in.InstanceID, 0); !strings.Contains(log, `msg="draft model loaded"`) ||
		!strings.Contains(log[strings.Index(log, `msg="draft model loaded"`):], `offload="4/4 blocks and the head on Vulkan0`) {
		t.Fatalf("the runner's log does not put the draft model on Vulkan0:\n%.4000s", log)
	}
	prompt := strings.Repeat("red green blue yellow ", 6)
	body := func(spec string) string {
		return `{"model":"` + modelID + `","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":40,"temperature":0,"ignore_eos":true` + spec + `}`
	}
	_, _, plain := chat(t, p, body(""))
	_, _, drafted := chat(t, p, body(`,"speculative":{"draft":"`+draftID+`","max":4,"min":4,"p_min":0}`))
	t.Logf("node %.8s: the draft drafted %d tokens, %d accepted", ids[0], drafted.Orrery.DraftTokens, drafted.Orrery.AcceptedDraftTokens)
	if len(plain.Choices) != 1 || len(drafted.Choices) != 1 || drafted.Choices[0].Message.Content != plain.Choices[0].Message.Content {
		t.Fatalf("speculation on the GPU changed the greedy answer:\n%+v\n%+v", plain, drafted)
	}
	if drafted.Orrery.DraftTokens == 0 || drafted.Orrery.AcceptedDraftTokens < drafted.Orrery.DraftTokens*9/10 {
		t.Errorf("the draft (a copy of the model) drafted %d, %d accepted: want drafts, nearly all accepted", drafted.Orrery.DraftTokens, drafted.Orrery.AcceptedDraftTokens)
	}
}

// dataDirOf is the agent's --data-dir.
func dataDirOf(t *testing.T, p *agentProc) string {
	t.Helper()
	args := p.cmd.Args
	for i, a := range args {
		if a == "--data-dir" && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("agent started without --data-dir: %v", args)
	return ""
}
