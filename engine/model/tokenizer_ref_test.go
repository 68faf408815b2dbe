package model

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

// A generated model tokenizes a ChatML prompt (special tokens, newlines,
// words the vocabulary has and has not) as llama.cpp does.
func TestGeneratedVocabMatchesLlamaCpp(t *testing.T) {
	dir := llamaref.Require(t, "bin/orrery-llama-vocab")
	path, f := genTiny(t, Presets["small"])
	tok, err := tokenizer.New(f)
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := tok.Chat([]runnerapi.Message{{Role: "system", Content: "You are a cluster."}, {Role: "user", Content: "hello Äpfel  world\n\n42 !!"}}, tokenizer.ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []string{prompt, "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", " ", "the orrery model"}
	inp := filepath.Join(t.TempDir(), "cases.inp")
	if err := os.WriteFile(inp, []byte(strings.Join(cases, "\n__ggml_vocab_test__\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(llamaref.Bin(dir, "orrery-llama-vocab"), "-m", path, "-f", inp, "-add-special", "-parse-special").Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	for i, c := range cases {
		ids, _, _ := strings.Cut(lines[i], "\t")
		var want []int32
		for _, s := range strings.Fields(ids) {
			n, _ := strconv.Atoi(s)
			want = append(want, int32(n))
		}
		got, err := tok.Encode(c, true)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q:\n got %v (%v)\nwant %v (llama.cpp)", c, got, err, want)
		}
		if i == 1 {
			t.Logf("ChatML prompt %q: %d tokens, llama.cpp %d", c, len(got), len(want))
		}
	}
}
