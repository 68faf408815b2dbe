package vocab

import (
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

// readCases reads a vocab test's inputs and expected ids the way llama.cpp's
// test-tokenizer-0 does.
func readCases(t *testing.T, base string) ([]string, [][]int32) {
	t.Helper()
	raw, err := os.ReadFile(base + ".inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(base + ".out")
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	var inputs []string
	s := string(raw)
	for pos := 0; pos < len(s); {
		i := strings.Index(s[pos:], sep)
		if i < 0 {
			inputs = append(inputs, s[pos:])
			break
		}
		inputs = append(inputs, s[pos:pos+i])
		pos += i + len(sep)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) != len(inputs) {
		t.Fatalf("%s: %d inputs, %d outputs", base, len(inputs), len(lines))
	}
	var want [][]int32
	for _, l := range lines {
		var ids []int32
		for _, f := range strings.Fields(l) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s.out: %q", base, l)
			}
			ids = append(ids, int32(n))
		}
		want = append(want, ids)
	}
	return inputs, want
}

// TestConformance holds every tokenizer in llama.cpp's models/ against its
// test vectors (encode, no BOS, special tokens not parsed) and against
// llama.cpp's own detokenization of the expected ids.
func TestConformance(t *testing.T) {
	dir := llamaref.Require(t, "llama.cpp/models", "bin/orrery-llama-vocab")
	files, _ := filepath.Glob(filepath.Join(dir, "llama.cpp/models/ggml-vocab-*.gguf"))
	if len(files) == 0 {
		t.Fatal("no ggml-vocab-*.gguf in the reference")
	}
	var summary []string
	for _, path := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "ggml-vocab-"), ".gguf")
		f, err := gguf.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		v, err := New(f)
		if _, statErr := os.Stat(path + ".inp"); statErr != nil {
			summary = append(summary, name+": no test vectors"+errNote(err))
			continue
		}
		if err != nil {
			if f.String("tokenizer.ggml.model", "") == "bert" && strings.Contains(err.Error(), "not supported") {
				summary = append(summary, name+": refused (WordPiece): "+err.Error())
				continue
			}
			t.Errorf("%s: %v", name, err)
			continue
		}
		inputs, want := readCases(t, path)
		ref, err := exec.Command(llamaref.Bin(dir, "orrery-llama-vocab"), "-m", path, "-f", path+".inp").Output()
		if err != nil {
			t.Fatalf("%s: orrery-llama-vocab: %v", name, err)
		}
		refLines := strings.Split(strings.TrimSuffix(string(ref), "\n"), "\n")
		if len(refLines) != len(inputs) {
			t.Fatalf("%s: llama.cpp gave %d lines for %d cases", name, len(refLines), len(inputs))
		}
		enc, dec := 0, 0
		for i, in := range inputs {
			got, err := v.Encode(in, false, false)
			if err == nil && slices.Equal(got, want[i]) {
				enc++
			} else {
				t.Errorf("%s: encode %q:\n got %v (%v)\nwant %v", name, in, got, err, want[i])
			}
			_, hx, _ := strings.Cut(refLines[i], "\t")
			wantText, _ := hex.DecodeString(hx)
			if g := v.Decode(want[i], false, true); g == string(wantText) {
				dec++
			} else {
				t.Errorf("%s: decode %v:\n got %q\nwant %q", name, want[i], g, wantText)
			}
		}
		summary = append(summary, name+": encode "+strconv.Itoa(enc)+"/"+strconv.Itoa(len(inputs))+", decode "+strconv.Itoa(dec)+"/"+strconv.Itoa(len(inputs)))
	}
	for _, s := range summary {
		t.Log(s)
	}
}

func errNote(err error) string {
	if err != nil {
		return " (" + err.Error() + ")"
	}
	return ""
}

// withPre writes a copy of llama.cpp's vocabulary from (e.g. "llama-bpe")
// with the pre-tokenizer pre, as ggml-vocab-<pre>.gguf in a temporary
// directory: the pre-tokenizers that no vocabulary in llama.cpp's models/
// uses (gpt-4o: gpt-oss's; tekken: Mistral's; deepseek-v3; kimi-k2) are then tested against llama.cpp's.
func withPre(t *testing.T, dir, from, pre string) string {
	t.Helper()
	f, err := gguf.ReadFile(filepath.Join(dir, "llama.cpp/models/ggml-vocab-"+from+".gguf"))
	if err != nil {
		t.Fatal(err)
	}
	kvs := slices.Clone(f.KV)
	for i := range kvs {
		if kvs[i].Key == "tokenizer.ggml.pre" {
			kvs[i].Value = pre
		}
	}
	path := filepath.Join(t.TempDir(), "ggml-vocab-"+pre+".gguf")
	if err := gguf.WriteFile(path, kvs, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// withoutMerges writes a copy of the vocabulary at path without
// tokenizer.ggml.merges, named after it with "-nomerges": llama.cpp loads a
// kimi-k2 vocabulary without merges (and refuses any other).
func withoutMerges(t *testing.T, path string) string {
	t.Helper()
	f, err := gguf.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kvs []gguf.KV
	for _, kv := range f.KV {
		if kv.Key != "tokenizer.ggml.merges" {
			kvs = append(kvs, kv)
		}
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(path), ".gguf")+"-nomerges.gguf")
	if err := gguf.WriteFile(out, kvs, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMatchesLlamaCpp runs every vocabulary Orrery loads (those without
// test vectors too, and llama-bpe's tokens under gpt-oss's gpt-4o,
// Mistral's tekken, DeepSeek V3's and Kimi K2's pre-tokenizers, the last
// with and without merges and with Kimi's special tokens) over one corpus, every test input of every vocabulary,
// chat-template text with special tokens, invalid UTF-8 and 100 seeded
// random strings, with BOS added and special tokens parsed, as a prompt is
// tokenized, and compares ids and detokenized text with llama.cpp's.
func TestMatchesLlamaCpp(t *testing.T) {
	dir := llamaref.Require(t, "llama.cpp/models", "bin/orrery-llama-vocab")
	files, _ := filepath.Glob(filepath.Join(dir, "llama.cpp/models/ggml-vocab-*.gguf"))
	var corpus []string
	for _, p := range files {
		if _, err := os.Stat(p + ".inp"); err == nil {
			in, _ := readCases(t, p)
			corpus = append(corpus, in...)
		}
	}
	kimi := withPre(t, dir, "llama-bpe", "kimi-k2")
	files = append(files, withPre(t, dir, "llama-bpe", "gpt-4o"), withPre(t, dir, "llama-bpe", "tekken"), withPre(t, dir, "llama-bpe", "deepseek-v3"),
		kimi, withoutMerges(t, kimi), withTokens(t, kimi, "-specials", kimiSpecials...))
	corpus = append(corpus,
		"HelloWorld's camelCase XMLHttpRequest iPhone ALLCAPS'LL Ünïcödé façadeÉtude",
		"12345 日本語のテキストとカタカナ 中文字符 (x+y)=z; \"quoted\"word -flag --long_opt a.b.c",
		"<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
		"<|im_system|>system<|im_middle|>You are Kimi.<|im_end|><|im_user|>user<|im_middle|>你好 [EOS]<|im_end|><|im_assistant|>assistant<|im_middle|>"+
			"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"北京\"}<|tool_call_end|><|tool_calls_section_end|>[EOT][PAD]",
		"<s>[INST] hi [/INST] there</s><s>[INST] again [/INST]",
		"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		"<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<|user|>\nhi<|end|>\n<|assistant|>\n",
		"text <|endoftext|> more", "  <unk>  </s> <s>",
		// Han (kimi-k2 cuts Han runs apart from other letters), mixed
		// with Latin and kana, contractions in both cases, long digit
		// runs, punctuation runs, newlines and spaces, emoji and marks.
		"Kimi说：我爱北京天安门，Hello世界！混合English和中文123456789。",
		"they're THEY'RE we'Ve I'D it'S you'll YOU'LL don't DON'T o'clock 'tis",
		"1234567 0.12345 -99999 ١٢٣٤٥ ⅫⅩ x²³ 3.14159265",
		"!!!??? ... --- ==> (([[{{}}]])) @#$%^&* 「引用」…",
		"line1\n\nline2\r\n\r\n  \t indented\n   \n\t\tend  ",
		"🦙🚀👍🏽 👨\u200d👩\u200d👧 ❤️ 🇯🇵!",
		"e\u0301te\u0301 cafe\u0301's 〇々〆 ㄅㄆ 한국어 テスト\u3000全角　空白",
		// Invalid UTF-8: llama.cpp's own rules for lead bytes.
		"|\xff'll\n1日本", "a\xc3", "\xe6\x97", "\xf0\x9f\x98 x", "\x80\x80abc", "\xf8\xf9\xfa\xfb\xfc", "é\xffé")
	// Seeded random strings over a mix of ASCII, whitespace, specials,
	// multi-byte characters and stray bytes.
	rng := rand.New(rand.NewPCG(14, 1))
	alphabet := []string{"a", "Z", " ", "  ", "\n", "\t", "'", "s", "ll", "1", "23", "!", "?", ".", "é", "ß", "日", "本", "🦙", "\u200d",
		"<s>", "</s>", "<|im_end|>", "▁", "\xff", "\x80", "\xc3", "Ġ"}
	for range 100 {
		var b strings.Builder
		for range 1 + rng.IntN(24) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		corpus = append(corpus, b.String())
	}
	slices.Sort(corpus)
	corpus = slices.Compact(corpus)
	inp := filepath.Join(t.TempDir(), "corpus.inp")
	if err := os.WriteFile(inp, []byte(strings.Join(corpus, "\n__ggml_vocab_test__\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "ggml-vocab-"), ".gguf")
		f, err := gguf.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		v, err := New(f)
		if err != nil {
			t.Logf("%s: refused: %v", name, err)
			continue
		}
		ref, err := exec.Command(llamaref.Bin(dir, "orrery-llama-vocab"), "-m", path, "-f", inp, "-add-special", "-parse-special").Output()
		if err != nil {
			t.Fatalf("%s: orrery-llama-vocab: %v", name, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(ref), "\n"), "\n")
		if len(lines) != len(corpus) {
			t.Fatalf("%s: llama.cpp gave %d lines for %d cases", name, len(lines), len(corpus))
		}
		enc, dec := 0, 0
		for i, in := range corpus {
			ids, hx, _ := strings.Cut(lines[i], "\t")
			var want []int32
			for _, s := range strings.Fields(ids) {
				n, _ := strconv.Atoi(s)
				want = append(want, int32(n))
			}
			got, err := v.Encode(in, true, true)
			if err == nil && slices.Equal(got, want) {
				enc++
			} else {
				t.Errorf("%s: encode %q:\n got %v (%v)\nwant %v", name, in, got, err, want)
			}
			wantText, _ := hex.DecodeString(hx)
			if g := v.Decode(want, false, true); g == string(wantText) {
				dec++
			} else {
				t.Errorf("%s: decode %v:\n got %q\nwant %q", name, want, g, wantText)
			}
		}
		t.Logf("%s: encode %d/%d, decode %d/%d (BOS added, special tokens parsed)", name, enc, len(corpus), dec, len(corpus))
	}
}

// withTokens writes a copy of the vocabulary at path with the tokens it
// lacks appended (typed normal, as a file may type them: llama.cpp retypes
// them by name), named after it with suffix.
func withTokens(t *testing.T, path, suffix string, tokens ...string) string {
	t.Helper()
	f, err := gguf.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := f.Get("tokenizer.ggml.tokens")
	tokens = slices.DeleteFunc(slices.Clone(tokens), func(s string) bool { return slices.Contains(old.([]string), s) })
	kvs := slices.Clone(f.KV)
	for i := range kvs {
		switch x := kvs[i].Value.(type) {
		case []string:
			if kvs[i].Key == "tokenizer.ggml.tokens" {
				kvs[i].Value = append(slices.Clone(x), tokens...)
			}
		case []int32:
			if kvs[i].Key == "tokenizer.ggml.token_type" {
				kvs[i].Value = append(slices.Clone(x), slices.Repeat([]int32{TypeNormal}, len(tokens))...)
			}
		case []float32:
			if kvs[i].Key == "tokenizer.ggml.scores" {
				kvs[i].Value = append(slices.Clone(x), make([]float32, len(tokens))...)
			}
		}
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(path), ".gguf")+suffix+".gguf")
	if err := gguf.WriteFile(out, kvs, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// kimiSpecials are Kimi K2's added tokens (its tokenizer_config.json),
// appended to llama-bpe's vocabulary to hold their handling to llama.cpp's.
var kimiSpecials = []string{"[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
	"<|end_header_id|>", "[EOT]", "<|im_system|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
	"<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|im_middle|>", "[UNK]", "[PAD]"}

// TestEOGMatchesLlamaCpp holds the tokens that end generation, for every
// vocabulary Orrery loads and Kimi K2's special tokens on llama-bpe's, to
// llama.cpp's llama_vocab_is_eog.
func TestEOGMatchesLlamaCpp(t *testing.T) {
	dir := llamaref.Require(t, "llama.cpp/models", "bin/orrery-llama-vocab")
	files, _ := filepath.Glob(filepath.Join(dir, "llama.cpp/models/ggml-vocab-*.gguf"))
	kimi := withPre(t, dir, "llama-bpe", "kimi-k2")
	files = append(files, withTokens(t, kimi, "-specials", kimiSpecials...),
		// gpt-oss's and Solar Open's markers, whose <|end|> does not end
		// generation in llama.cpp.
		withTokens(t, filepath.Join(dir, "llama.cpp/models/ggml-vocab-llama-bpe.gguf"), "-harmony", "<|return|>", "<|call|>", "<|end|>", "<|channel|>"),
		withTokens(t, filepath.Join(dir, "llama.cpp/models/ggml-vocab-llama-bpe.gguf"), "-solar", "<|calls|>", "<|flush|>", "<|end|>"))
	for _, path := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "ggml-vocab-"), ".gguf")
		f, err := gguf.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		v, err := New(f)
		if err != nil {
			continue // refused: TestMatchesLlamaCpp says so
		}
		cmd := exec.Command(llamaref.Bin(dir, "orrery-llama-vocab"), "-m", path, "-eog")
		ref, err := cmd.Output()
		if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == 2 {
			msg := "orrery-llama-vocab has no -eog: rebuild it with scripts/llama-ref.sh (make llama-ref)"
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		if err != nil {
			t.Fatalf("%s: orrery-llama-vocab -eog: %v", name, err)
		}
		var want []int32
		for _, s := range strings.Fields(string(ref)) {
			n, _ := strconv.Atoi(s)
			want = append(want, int32(n))
		}
		got := slices.Sorted(slices.Values(v.eog))
		var texts []string
		for _, id := range got {
			texts = append(texts, strconv.Quote(v.Text(id)))
		}
		if !slices.Equal(got, want) {
			var wantTexts []string
			for _, id := range want {
				wantTexts = append(wantTexts, strconv.Quote(v.Text(id)))
			}
			t.Errorf("%s: end of generation %v %v, llama.cpp %v %v", name, got, texts, want, wantTexts)
			continue
		}
		t.Logf("%s: end of generation %v", name, texts)
	}
}
