package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/split"
)

// moeOverThree runs a mixture-of-experts model (gen-model --arch
// qwen3moe) through the three agents of TestPipelineProcesses: the
// placement preview of each rank counts all the experts of its layers,
// and three ranks (the model on c, shards fetched by a and b) give the
// tokens of one rank.
func moeOverThree(t *testing.T, bin string, a, b *agentProc, ids []string, dirC string) {
	t.Helper()
	modelID := genModel(t, bin, dirC, "moe-test", "--preset", "small", "--arch", "qwen3moe")
	poll(t, a, 30*time.Second, "the MoE model in A's /v1/models", func() (bool, string) {
		_, body, _ := a.get("/v1/models")
		return strings.Contains(string(body), modelID), string(body)
	})
	f, err := gguf.ReadFile(filepath.Join(dirC, "models", modelID+".gguf"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.FromGGUF(f)
	if err != nil || cfg.Experts == 0 {
		t.Fatalf("%s: %+v %v", modelID, cfg, err)
	}
	var pv struct {
		Previews []struct {
			Nodes int
			Ranks []struct {
				FirstLayer, LastLayer int
				NeedBytes             uint64
			}
		}
	}
	poll(t, a, 10*time.Second, "MoE previews over 3 nodes", func() (bool, string) {
		a.mustGet(t, "/instance/previews?model="+modelID, &pv)
		return len(pv.Previews) == 3, fmt.Sprintf("%+v", pv)
	})
	for _, p := range pv.Previews {
		for _, r := range p.Ranks {
			weights, err := split.ShardSize(f, cfg, r.FirstLayer, r.LastLayer)
			if err != nil || r.NeedBytes < weights {
				t.Errorf("preview of %d nodes: rank [%d, %d) needs %d bytes, less than its %d bytes of weights (all %d experts of its layers): %v",
					p.Nodes, r.FirstLayer, r.LastLayer, r.NeedBytes, weights, cfg.Experts, err)
			}
		}
	}
	req := `{"model":"` + modelID + `","messages":[{"role":"user","content":"hello experts"}],"max_tokens":12,"temperature":0,"ignore_eos":true}`
	one := placeJSON(t, a, `{"model":"`+modelID+`","node":"`+ids[2]+`"}`)
	waitReadyRanks(t, a, one)
	code, _, ref := chat(t, a, req)
	if code != http.StatusOK || ref.Usage.CompletionTokens != 12 {
		t.Fatalf("MoE on one rank: %d %+v", code, ref)
	}
	deleteInstance(t, a, one.InstanceID)
	three := placeJSON(t, a, fmt.Sprintf(`{"model":"%s","nodes":["%s","%s","%s"]}`, modelID, ids[0], ids[1], ids[2]))
	waitReadyRanks(t, b, three)
	code, _, got := chat(t, b, req)
	if code != http.StatusOK || got.Choices[0].Message.Content != ref.Choices[0].Message.Content {
		t.Fatalf("MoE over 3 ranks: %d %q, 1 rank: %q", code, got.Choices[0].Message.Content, ref.Choices[0].Message.Content)
	}
	deleteInstance(t, a, three.InstanceID)
}

// gen-model --arch takes every family and refuses others, listing them.
func TestGenModelArch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	code, out, errs := runCLI("gen-model", "--preset", "tiny", "--arch", "mamba", "-o", path)
	if code != 2 || out != "" || !strings.Contains(errs, `arch "mamba": want one of [llama llama3 qwen2 qwen3 qwen3moe gemma3 phi3 gpt-oss mistral3 deepseek2 glm4moe]`) {
		t.Errorf("--arch mamba: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, fam := range model.Families {
		code, out, errs := runCLI("gen-model", "--preset", "tiny", "--arch", fam, "-o", path)
		if code != 0 || strings.TrimSpace(out) != path {
			t.Fatalf("--arch %s: exit %d, stdout %q, stderr %q", fam, code, out, errs)
		}
		f, err := gguf.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := model.FromGGUF(f)
		want := map[string]string{"llama3": "llama"}[fam]
		if want == "" {
			want = fam
		}
		if err != nil || cfg.Arch != want || cfg.RopeFreqs != (fam == "llama3") || (cfg.Experts > 0) != (fam == "qwen3moe" || fam == "gpt-oss" || fam == "deepseek2" || fam == "glm4moe") {
			t.Errorf("--arch %s wrote %+v (%v)", fam, cfg, err)
		}
	}
	// --yarn writes YaRN scaling where the family has it.
	if code, _, errs := runCLI("gen-model", "--preset", "tiny", "--arch", "qwen3", "--yarn", "4", "-o", path); code != 0 {
		t.Fatalf("--yarn 4: exit %d, %s", code, errs)
	}
	f, err := gguf.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := model.FromGGUF(f); err != nil || !cfg.YaRN || cfg.RopeScale != 4 || cfg.YaRNOrigCtx != 512 {
		t.Errorf("--yarn 4 wrote %+v (%v)", cfg, err)
	}
	if code, _, errs := runCLI("gen-model", "--preset", "tiny", "--arch", "gemma3", "--yarn", "4", "-o", path); code != 2 || !strings.Contains(errs, "YaRN factor 4") {
		t.Errorf("--arch gemma3 --yarn 4: exit %d, %s", code, errs)
	}
}
