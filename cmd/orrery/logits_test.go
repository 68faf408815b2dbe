package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/model"
)

func TestLogitsCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := model.Generate(path, model.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("logits", "--model", path, "--prompt-ids", "3,1,4,1,5", "--gen", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep logitsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(rep.Tokens) != 4 || len(rep.Logits) != 4 || len(rep.Prompt) != 5 {
		t.Fatalf("got %d tokens, %d logit rows, prompt %v; want 4, 4, 5 ids", len(rep.Tokens), len(rep.Logits), rep.Prompt)
	}
	// By default a reference: every block on the CPU, saying so.
	if o := rep.Offload; o.Device != nil || o.Blocks != 0 || o.Total != model.Presets["tiny"].Layers || o.Reason != "--gpu-layers 0" {
		t.Errorf("offload %+v, want the CPU's 0/%d blocks by --gpu-layers 0", o, model.Presets["tiny"].Layers)
	}
	vocab := model.Presets["tiny"].Vocab
	for i, row := range rep.Logits {
		if len(row) != vocab {
			t.Fatalf("row %d has %d logits, want the vocabulary's %d", i, len(row), vocab)
		}
		if got := argmax(row); int32(got) != rep.Tokens[i] {
			t.Errorf("step %d chose %d, but its logits' largest is %d", i, rep.Tokens[i], got)
		}
	}
	// The same run again gives the same bits: the command is deterministic.
	if _, again, _ := runCLI("logits", "--model", path, "--prompt-ids", "3,1,4,1,5", "--gen", "4"); again != out {
		t.Error("a second run printed different logits")
	}
}

func TestLogitsCommandRefusals(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--prompt-ids 1,2", "--model is required"},
		{"--model x.gguf --prompt-ids 1,,2", `"" is not a token id`},
		{"--model x.gguf --prompt-ids -3", `"-3" is not a token id`},
		{"--model x.gguf --gen 0", "--gen must be 1..4096"},
		{"--model x.gguf --kv-type q4", "kv cache type \"q4\""},
		{"--model x.gguf --gpu-layers most", `gpu layers "most": want auto, 0 or a number of blocks`},
	} {
		code, _, errOut := runCLI(append([]string{"logits"}, strings.Fields(c.args)...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("logits %s: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	code, _, errOut := runCLI("logits", "--model", filepath.Join(t.TempDir(), "none.gguf"))
	if code != 1 || !strings.Contains(errOut, "none.gguf") {
		t.Errorf("a missing file: exit %d, %q; want 1 naming the file", code, errOut)
	}
}

func TestPerplexityCommandRefusals(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"-f x.txt", "--model and -f are required"},
		{"--model x.gguf", "--model and -f are required"},
		{"--model x.gguf -f x.txt --ctx 2", "--ctx must be 4..1048576"},
		{"--model x.gguf -f x.txt --chunks -1", "--chunks ≥ 0"},
		{"--model x.gguf -f x.txt --kv-type q4", "kv cache type \"q4\""},
	} {
		code, _, errOut := runCLI(append([]string{"perplexity"}, strings.Fields(c.args)...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("perplexity %s: exit %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	code, _, errOut := runCLI("perplexity", "--model", "x.gguf", "-f", filepath.Join(t.TempDir(), "none.txt"))
	if code != 1 || !strings.Contains(errOut, "none.txt") {
		t.Errorf("a missing text: exit %d, %q; want 1 naming the file", code, errOut)
	}
}
