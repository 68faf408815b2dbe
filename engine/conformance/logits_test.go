package conformance

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/backend/ggml"
	"github.com/orrery-cluster/orrery/engine/internal/reference"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/split"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

// The conformance shape: small enough to run every case in CI in about a
// minute, with rows that are multiples of 256 so that llama-quantize makes
// real K-quants (not per-tensor fallbacks).
var shape = model.GenOptions{Layers: 6, Dim: 512, FFDim: 1536, Heads: 8, KVHeads: 4, Vocab: 4096, ContextLen: 256, Seed: 11}

const (
	promptLen = 64
	genLen    = 32
	threads   = 2
)

// A variant is a weight type: written by gen-model, or made from the F32
// file by llama-quantize. minTop1 is the goal for teacher-forced
// top-1 agreement. exact: the type's CPU kernels are the same in both
// ggml builds, so with matched settings the logits must agree to the last
// bits (the K-quants' kernels differ between ollama's pinned ggml and
// llama.cpp's).
type variant struct {
	typ      string
	quantize bool
	minTop1  float64
	exact    bool
	// bound is the largest max |Δ| / std accepted under either setting: a
	// wrong op (RoPE, norm, scale, bias) gives O(1).
	bound float64
	// repacks: some of its matrices are of a type ggml repacks.
	repacks bool
}

var variants = []variant{
	{"F32", false, 0.99, true, 0.02, false}, {"F16", false, 0.99, true, 0.02, false}, {"BF16", false, 0.99, true, 0.1, false},
	{"Q8_0", false, 0.99, true, 0.3, false}, {"Q4_0", true, 0.97, true, 0.3, true},
	{"Q4_K_M", true, 0.97, false, 0.3, true}, {"Q5_K_M", true, 0.97, false, 0.3, false}, {"Q6_K", true, 0.97, false, 0.3, false},
	// The other types Orrery runs (model.SupportedTypes); the issue sets
	// no goal for them (0), their rows show that they load and compute.
	{"Q4_1", true, 0, true, 0.3, false}, {"Q5_0", true, 0, false, 0.3, false}, {"Q5_1", true, 0, false, 0.3, false},
	{"Q2_K", true, 0, false, 1, false}, {"Q3_K_M", true, 0, false, 0.5, false},
	{"IQ4_NL", true, 0, false, 0.3, true}, {"IQ4_XS", true, 0, false, 0.3, false},
	// gpt-oss's: experts in MXFP4, the other matrices Q8_0; written by
	// gen-model, and by llama-quantize as MXFP4_MOE (see mxfp4).
	{"MXFP4", false, 0.97, true, 0.3, false}, {"MXFP4_MOE", true, 0.97, true, 0.3, false},
}

// mxfp4 reports a type of MXFP4 experts: for mixture-of-experts models
// only, and one that llama.cpp's newer ggml repacks on x86 while the
// pinned one does not, so that under repacking the two engines' kernels
// differ (see docs/conformance.md).
func mxfp4(typ string) bool { return strings.HasPrefix(typ, "MXFP4") }

// canRepack: this machine is one where Orrery repacks (see
// engine/backend/ggml/repack.go).
func canRepack() bool {
	return runtime.GOOS == "linux" && runtime.GOARCH == "amd64" && cpu.X86.HasAVX2
}

// A setting is how both engines run: their defaults (flash attention, f16
// KV cache, Q4_0/Q4_K/IQ4_NL weights repacked for ggml's tiled CPU
// kernels), or matched (no flash attention, f32 KV cache), where the two
// ggml builds run the same kernels, with and without repacking.
type setting struct {
	name          string
	flashAttn, kv string
	repack        bool
}

var settings = []setting{{"defaults", "on", "f16", true}, {"matched", "off", "f32", false}, {"matched, repacked", "off", "f32", true}}

// row is one line of the report.
type row struct {
	setting, arch, typ string
	ranks              int
	tensor             int     // > 1: the ranks are one tensor-parallel group
	top1               float64 // teacher-forced argmax agreement over the prompt
	maxDelta           float64 // max |Δlogit| / std of the reference's logits
	rmsDelta           float64 // rms |Δlogit|, absolute
	diverge            int     // first differing greedy token, -1: none in genLen
	margin             float64 // the reference's relative top-2 margin there
	gap                float64 // the reference's absolute top-2 gap there
	// Each engine's max |Δlogit| / std against exact float64 math on the
	// same weights (NaN where the float64 reference cannot read the type).
	exactOrrery, exactLlama float64
	repacked                int
}

// families are the gen-model architectures under test and the weight
// types each is tested in: every type Orrery runs for llama and qwen2; for
// the newer families the types their published GGUFs ship in (BF16,
// Q8_0, Q4_K_M, Q6_K), plus F32 and Q4_0 (an exact type that repacks).
var families = []struct {
	family string
	types  []string                // nil: all variants
	tweak  func(*model.GenOptions) // changes to the family's shape, if any
	name   string                  // the row's name, when tweaked
}{
	{family: "llama"}, {family: "qwen2"},
	{family: "llama3", types: shipped},
	{family: "qwen3", types: shipped},
	{family: "qwen3moe", types: append(slices.Clone(shipped), "MXFP4")},
	{family: "gemma3", types: shipped},
	{family: "mistral3", types: shipped},
	{family: "deepseek2", types: append(slices.Clone(shipped), "MXFP4")},
	{family: "glm4moe", types: append(slices.Clone(shipped), "MXFP4")},
	// GLM-4.5-Air's attention: no q/k norms.
	{family: "glm4moe", types: []string{"F32", "Q8_0"}, name: "glm4moe-air",
		tweak: func(o *model.GenOptions) { o.NoQKNorm = true }},
	{family: "phi3", types: shipped},
	{family: "gpt-oss", types: []string{"F32", "BF16", "Q8_0", "MXFP4", "MXFP4_MOE"}},
	// Qwen3's long-context GGUFs: YaRN ×4 over an original 32768, as
	// Qwen3's model cards give it.
	{family: "qwen3", types: []string{"F32", "Q8_0", "Q4_K_M"}, name: "qwen3+yarn",
		tweak: func(o *model.GenOptions) { o.YaRN, o.YaRNOrigCtx = 4, 32768 }},
}

// shipped are the types the newer families' GGUFs ship in, plus F32 and
// Q4_0 (an exact type that repacks).
var shipped = []string{"F32", "BF16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K"}

// TestLogitsMatchLlamaCpp feeds the same 64 token ids to Orrery (ggml,
// through engine/backend/ggml: on one rank, and over three ranks each
// loading its shard, hidden states handed from rank to rank) and to
// llama.cpp, compares the logits at every position, then lets both continue
// greedily for 32 tokens; for every family, its weight types and the three
// settings; and, for the exact types under matched kernels, through
// tensor-parallel groups of 2 and 3 ranks (tp_test.go). The table goes
// into docs/conformance.md. A family is a subtest:
// -run 'TestLogitsMatchLlamaCpp/qwen3moe' runs one.
func TestLogitsMatchLlamaCpp(t *testing.T) {
	dir := llamaref.Require(t, "bin/orrery-llama-logits", "bin/llama-quantize")
	ids := promptIDs(shape.Vocab)
	var rows []row
	for _, fam := range families {
		name := cmp.Or(fam.name, fam.family)
		t.Run(name, func(t *testing.T) {
			rows = append(rows, conformFamily(t, dir, fam.family, name, fam.types, fam.tweak, ids)...)
		})
	}
	t.Log("\n" + table(rows))
}

// conformFamily runs one family's rows.
func conformFamily(t *testing.T, dir, family, name string, types []string, tweak func(*model.GenOptions), ids []int32) []row {
	work := t.TempDir()
	o, err := model.ApplyFamily(shape, family)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(&o)
	}
	base := filepath.Join(work, name+"-F32.gguf")
	o.Type = "F32"
	if err := model.Generate(base, o); err != nil {
		t.Fatal(err)
	}
	var rows []row
	for _, v := range variants {
		if types != nil && !slices.Contains(types, v.typ) || types == nil && mxfp4(v.typ) {
			continue
		}
		path := variantOf(t, dir, o, work, name, base, v)
		exact := runExact(t, path, ids)
		for _, st := range settings {
			ref := runReference(t, dir, path, ids, st)
			var one result
			for _, ranks := range []int{1, 3} {
				got := runOrrery(t, path, ranks, ids, st)
				if ranks == 1 {
					one = got
				}
				r := compare(ref, got)
				r.setting, r.arch, r.typ, r.ranks = st.name, name, v.typ, ranks
				r.exactOrrery, r.exactLlama = distance(exact, got), distance(exact, ref)
				rows = append(rows, r)
				if o.Experts > 0 {
					checkMoE(t, v, st, r)
				} else {
					check(t, v, st, r)
				}
			}
			// Tensor-parallel groups of the exact types, under matched
			// kernels: against llama.cpp and against one rank.
			if !v.exact || st.name != "matched" {
				continue
			}
			for _, tp := range []int{2, 3} {
				got, err := runOrreryTP(t, path, tp, ids, st)
				if errors.Is(err, errNoSplit) {
					t.Logf("%s-%s: no tensor-parallel row of %d: %v", name, v.typ, tp, err)
					continue
				}
				r, vsOne := compare(ref, got), compare(one, got)
				r.setting, r.arch, r.typ, r.ranks, r.tensor = st.name, name, v.typ, tp, tp
				r.exactOrrery, r.exactLlama = distance(exact, got), distance(exact, ref)
				vsOne.arch, vsOne.typ, vsOne.tensor = name, v.typ, tp
				rows = append(rows, r)
				t.Logf("%s %s-%s, tensor %d: max |Δ|/std %.2g against one rank, %.2g against llama.cpp", st.name, name, v.typ, tp, vsOne.maxDelta, r.maxDelta)
				checkTP(t, v, st, r, vsOne, o.Experts > 0)
			}
		}
	}
	return rows
}

// checkMoE loosens a variant's bounds for a mixture of experts, where
// the top-k choice of experts is discrete: a difference of rounding that
// flips one choice at a near-tie moves that position's logits by 0.1–0.5
// of a std (measured: 0.09 for F32 with the f16 flash attention of
// ollama's ggml, up to 0.5 for Q6_K), with no error in the graph. A wrong
// router, norm or expert op instead misroutes every token: logits O(1)
// away and top-1 agreement near chance. So every MoE row is held to ≤ 0.75
// of a std and ≥ 85 % top-1, and the exact types, whose kernels match,
// still to identical logits under matched settings.
//
// Some models' routing is more fragile: gpt-oss's random weights (biased
// experts, a softmax over the 4 chosen of 16) and deepseek2's move
// 0.3–1.6 of a std from rounding alone, llama.cpp's own logits as far
// from exact float64 math on the same weights as from Orrery's. Where llama.cpp is that far from exact,
// the bound is 1.5 × its distance: the two engines may differ by what
// rounding does to llama.cpp itself; and where it is more than 0.75 of a
// std away (deepseek2's sigmoid routing by groups, its experts' weights
// scaled by 2.5), top-1 agreement need only be 50 % (chance is 1 in
// 4096) and, in the defaults, greedy outputs may part anywhere. The
// matched rows, identical for the exact types, carry the graph's
// conformance.
func checkMoE(t *testing.T, v variant, st setting, r row) {
	t.Helper()
	v.bound = max(v.bound, 0.75)
	if !math.IsNaN(r.exactLlama) {
		v.bound = max(v.bound, 1.5*r.exactLlama)
	}
	floor := 0.85
	if r.exactLlama > 0.75 {
		floor = 0.5
		if st.flashAttn == "on" {
			// Under kernels that differ, a flipped expert choice in so
			// fragile a model can make the greedy outputs part
			// anywhere, not only at near-ties.
			v.exact = false
		}
	}
	check(t, v, st, r)
	if r.top1 < floor {
		t.Errorf("%s %s-%s on %d rank(s): top-1 agreement %.1f %% under %.0f %%", st.name, r.arch, r.typ, r.ranks, 100*r.top1, 100*floor)
	}
}

// check holds one row to the bounds: exact types agree to the last bits
// under matched settings; every type stays within its bound; for the exact
// types a greedy divergence is allowed only at a near-tie, where llama.cpp's
// own top-2 gap is within 4 rms of the two engines' measured difference
// (the K-quants' kernels differ, and their differences grow along the free
// run). The top-1 goals are reported, not asserted: with 64
// positions one near-tie costs 1.6 %.
func check(t *testing.T, v variant, st setting, r row) {
	t.Helper()
	what := fmt.Sprintf("%s %s-%s on %d rank(s)", st.name, r.arch, r.typ, r.ranks)
	exact := v.exact && st.flashAttn == "off" && !(st.repack && mxfp4(v.typ))
	if exact && (r.maxDelta > 1e-4 || r.top1 < 1 || r.diverge >= 0) {
		t.Errorf("%s: max |Δ|/std %.2g, top-1 %.1f %%, divergence at %d; want the same logits (≤ 1e-4) as llama.cpp", what, r.maxDelta, 100*r.top1, r.diverge)
	}
	if r.maxDelta > v.bound {
		t.Errorf("%s: max |Δ|/std %.2g over %.2g", what, r.maxDelta, v.bound)
	}
	if v.exact && r.diverge >= 0 && r.gap > 4*r.rmsDelta {
		t.Errorf("%s: greedy output diverges at token %d where llama.cpp's top-2 gap %.3g is beyond the engines' noise (4 × rms Δ = %.3g)", what, r.diverge, r.gap, 4*r.rmsDelta)
	}
	// Against exact float64 math (which also checks the reference's
	// dequantizers: a wrong one puts both engines O(1) away), Orrery is no
	// further off than llama.cpp when both run the same kernels.
	if st.flashAttn == "off" && !math.IsNaN(r.exactOrrery) && r.exactOrrery > 1.5*r.exactLlama+1e-4 {
		t.Errorf("%s: %.2g from exact float64 logits, llama.cpp %.2g", what, r.exactOrrery, r.exactLlama)
	}
	// Where ggml can repack (x86 with AVX2, a build with
	// GGML_USE_CPU_REPACK as the Makefile's), Orrery must have: the
	// matched, repacked rows then test its tiled kernels.
	if st.repack && v.repacks && canRepack() && r.repacked == 0 {
		t.Errorf("%s: no matrix repacked (built without -DGGML_USE_CPU_REPACK in CGO_CXXFLAGS?)", what)
	}
	if r.top1 < v.minTop1 {
		t.Logf("%s: top-1 agreement %.1f %% misses the goal of %.0f %%", what, 100*r.top1, 100*v.minTop1)
	}
}

// promptIDs is a fixed prompt: BOS, then ids drawn from the vocabulary's
// ordinary pieces.
func promptIDs(vocab int) []int32 {
	rng := rand.New(rand.NewPCG(1, 2))
	ids := []int32{1}
	for len(ids) < promptLen {
		ids = append(ids, int32(261+rng.IntN(vocab-261)))
	}
	return ids
}

func quantize(t *testing.T, dir, src, dst, typ string) {
	t.Helper()
	out, err := exec.Command(llamaref.Bin(dir, "llama-quantize"), src, dst, typ, strconv.Itoa(threads)).CombinedOutput()
	if err != nil {
		t.Fatalf("llama-quantize %s: %v\n%s", typ, err, tail(out))
	}
}

func tail(b []byte) string {
	s := string(b)
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// result is one engine's logits: one row per prompt position, then one per
// generated token but the last (the row that predicted the next), and the
// greedy tokens.
type result struct {
	logits [][]float32
	gen    []int32
	// repacked counts Orrery's matrices in ggml's repack buffers.
	repacked int
}

func runReference(t *testing.T, dir, path string, ids []int32, st setting) result {
	t.Helper()
	return runLlama(t, dir, path, ids, st, genLen, shape.Vocab)
}

// runLlama is llama.cpp's logits over the prompt ids and gen greedy
// tokens of a model of vocab tokens.
func runLlama(t *testing.T, dir, path string, ids []int32, st setting, gen, vocab int) result {
	t.Helper()
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = strconv.Itoa(int(id))
	}
	out := filepath.Join(t.TempDir(), "logits.f32")
	cmd := exec.Command(llamaref.Bin(dir, "orrery-llama-logits"), "-m", path, "-p", strings.Join(strs, ","),
		"-n", strconv.Itoa(gen), "-t", strconv.Itoa(threads), "-kv", st.kv, "-fa", st.flashAttn, "-repack", map[bool]string{true: "on", false: "off"}[st.repack], "-o", out)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.cpp on %s: %v\n%s", filepath.Base(path), err, stderr.String())
	}
	var meta struct {
		NVocab    int     `json:"nVocab"`
		NPrompt   int     `json:"nPrompt"`
		Generated []int32 `json:"generated"`
	}
	if err := json.Unmarshal(stdout, &meta); err != nil {
		t.Fatalf("llama.cpp output %q: %v", stdout, err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rows := meta.NPrompt + len(meta.Generated) - 1
	if meta.NVocab != vocab || len(raw) != rows*meta.NVocab*4 {
		t.Fatalf("llama.cpp wrote %d bytes of logits, want %d rows of %d", len(raw), rows, meta.NVocab)
	}
	r := result{gen: meta.Generated}
	for i := range rows {
		row := make([]float32, meta.NVocab)
		for j := range row {
			row[j] = math.Float32frombits(binary.LittleEndian.Uint32(raw[(i*meta.NVocab+j)*4:]))
		}
		r.logits = append(r.logits, row)
	}
	return r
}

// runOrrery runs the prompt through ranks ggml ranks (shards cut from the
// file when more than one), every position's logits kept, then decodes
// greedily through the KV caches.
func runOrrery(t *testing.T, path string, ranks int, ids []int32, st setting) result {
	t.Helper()
	paths := []string{path}
	if ranks > 1 {
		paths = nil
		for i := range ranks {
			first, last := i*shape.Layers/ranks, (i+1)*shape.Layers/ranks
			p := filepath.Join(t.TempDir(), fmt.Sprintf("shard-%d.gguf", i))
			if err := split.WriteShard(path, p, first, last, ""); err != nil {
				t.Fatalf("cut shard %d: %v", i, err)
			}
			paths = append(paths, p)
		}
	}
	var rs []*ggml.Rank
	for _, p := range paths {
		r, err := ggml.Load(context.Background(), p, optionsOf(st), nil)
		if err != nil {
			t.Fatalf("load %s: %v", filepath.Base(p), err)
		}
		defer r.Close()
		rs = append(rs, r)
	}
	r, err := generate(rs, ids, shape.Vocab, genLen)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// optionsOf is how the conformance runs Orrery under a setting: on the
// CPU (the GPU rows set GPULayers).
func optionsOf(st setting) backend.Options {
	return backend.Options{Threads: threads, BatchSize: promptLen, KVType: st.kv, NoFlashAttention: st.flashAttn == "off", NoRepack: !st.repack}
}

// generate runs the prompt through ranks, a pipeline (every position's
// logits kept), then decodes greedily through their KV caches.
func generate(rs []*ggml.Rank, ids []int32, vocab, gen int) (result, error) {
	forward := func(tokens []int32, start int, all bool) ([][]float32, error) {
		b := backend.Batch{Tokens: tokens, AllLogits: all}
		for i := range tokens {
			b.Positions = append(b.Positions, int32(start+i))
		}
		for i, r := range rs {
			res, err := r.Forward(context.Background(), b)
			if err != nil {
				return nil, fmt.Errorf("rank %d forward: %w", i, err)
			}
			b = backend.Batch{Hidden: res.Hidden, Positions: b.Positions, AllLogits: all}
			if i == len(rs)-1 {
				return rowsOf(res.Logits, vocab), nil
			}
		}
		return nil, nil
	}
	var r result
	for _, rk := range rs {
		r.repacked += rk.Repacked
	}
	var err error
	if r.logits, err = forward(ids, 0, true); err != nil {
		return r, err
	}
	last := r.logits[len(r.logits)-1]
	for i := range gen {
		tok := int32(reference.Argmax(last))
		r.gen = append(r.gen, tok)
		if i == gen-1 {
			break
		}
		next, err := forward([]int32{tok}, len(ids)+i, false)
		if err != nil {
			return r, err
		}
		last = next[0]
		r.logits = append(r.logits, last)
	}
	return r, nil
}

// runExact is the pure-Go float64 forward pass (no activation
// quantization, no f16 KV cache) over the prompt, or nil for a weight type
// it cannot read.
func runExact(t *testing.T, path string, ids []int32) [][]float64 {
	t.Helper()
	m, err := reference.Load(path)
	if err != nil {
		return nil
	}
	var rows [][]float64
	for i, id := range ids {
		rows = append(rows, m.Step(id, i))
	}
	return rows
}

// distance is max |Δ| / std of exact over the prompt's positions.
func distance(exact [][]float64, got result) float64 {
	if exact == nil {
		return math.NaN()
	}
	var sum, sumSq, n, d float64
	for i, row := range exact {
		for j, v := range row {
			sum += v
			sumSq += v * v
			n++
			d = max(d, math.Abs(v-float64(got.logits[i][j])))
		}
	}
	mean := sum / n
	return d / math.Sqrt(sumSq/n-mean*mean)
}

func rowsOf(x []float32, n int) [][]float32 {
	var rows [][]float32
	for i := 0; i+n <= len(x); i += n {
		rows = append(rows, x[i:i+n])
	}
	return rows
}

// margin is the gap between the two largest logits over the largest's
// magnitude, and the gap itself.
func margin(x []float32) (rel, gap float64) {
	s := slices.Clone(x)
	slices.Sort(s)
	a, b := float64(s[len(s)-1]), float64(s[len(s)-2])
	return (a - b) / max(math.Abs(a), 1e-30), a - b
}

func compare(ref, got result) row {
	r := row{diverge: -1, repacked: got.repacked}
	prompt := len(ref.logits) - len(ref.gen) + 1 // the prompt's rows, then one per generated token but the last
	var agree int
	var sum, sumSq, n, maxDelta, dSq float64
	for i := range prompt {
		if reference.Argmax(ref.logits[i]) == reference.Argmax(got.logits[i]) {
			agree++
		}
		for j, v := range ref.logits[i] {
			sum += float64(v)
			sumSq += float64(v) * float64(v)
			n++
			d := math.Abs(float64(v) - float64(got.logits[i][j]))
			maxDelta = max(maxDelta, d)
			dSq += d * d
		}
	}
	mean := sum / n
	std := math.Sqrt(sumSq/n - mean*mean)
	r.top1 = float64(agree) / float64(prompt)
	r.maxDelta = maxDelta / std
	r.rmsDelta = math.Sqrt(dSq / n)
	for i := range min(len(ref.gen), len(got.gen)) {
		if ref.gen[i] != got.gen[i] {
			r.diverge = i
			// The row that predicted token i: same context in both.
			r.margin, r.gap = margin(ref.logits[prompt-1+i])
			break
		}
	}
	return r
}

func table(rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| setting | arch | type | ranks | top-1 agreement | max \\|Δ\\| / std | first greedy divergence (of %d) | llama.cpp top-2 margin there (relative; gap / rms Δ) | vs exact: Orrery | vs exact: llama.cpp | repacked |\n", genLen)
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		div, m := "none", "–"
		if r.diverge >= 0 {
			div, m = strconv.Itoa(r.diverge), fmt.Sprintf("%.2g; %.2g", r.margin, r.gap/r.rmsDelta)
		}
		ex := func(v float64) string {
			if math.IsNaN(v) {
				return "–"
			}
			return fmt.Sprintf("%.2g", v)
		}
		ranks := strconv.Itoa(r.ranks)
		if r.tensor > 1 {
			ranks = fmt.Sprintf("tensor %d", r.tensor)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f %% | %.2g | %s | %s | %s | %s | %d |\n", r.setting, r.arch, r.typ, ranks, 100*r.top1, r.maxDelta, div, m, ex(r.exactOrrery), ex(r.exactLlama), r.repacked)
	}
	return b.String()
}
