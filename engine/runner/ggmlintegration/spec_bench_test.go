package ggmlintegration

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/llamaref"
)

// kjvDir holds the trained pair and its held-out text (models/kjv).
var kjvDir = filepath.Join("..", "..", "..", "models", "kjv")

// specPrompts are the held-out prompts: the first words of the first n
// held-out chapters (the models never saw these chapters).
func specPrompts(tb testing.TB, n, words int) []string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(kjvDir, "heldout.txt"))
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[:n] {
		f := strings.Fields(line)
		out = append(out, strings.Join(f[:min(words, len(f))], " "))
	}
	return out
}

// specArm is one way of decoding, run over every prompt.
type specArm struct {
	name      string
	spec      *runnerapi.Speculation
	tps       float64 // mean decode tok/s over the prompts and runs
	runs      int
	drafted   int
	accepted  int
	text      string // the last run's output
	completer func(runnerapi.CompletionRequest, func(runnerapi.Piece) error) (*runnerapi.Done, error)
}

func (a *specArm) run(tb testing.TB, prompts []string, gen int) {
	tb.Helper()
	for _, p := range prompts {
		req := runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: p, MaxTokens: gen, IgnoreEOS: true, Speculative: a.spec}}
		var text strings.Builder
		done, err := a.completer(req, func(p runnerapi.Piece) error { text.WriteString(p.Text); return nil })
		a.text = text.String()
		if err != nil {
			tb.Fatalf("%s: %v", a.name, err)
		}
		a.tps += done.DecodeTokPerSec()
		a.runs++
		a.drafted += done.DraftTokens
		a.accepted += done.AcceptedDraftTokens
	}
}

// runAtOnce sends prompts at once and counts their aggregate tok/s: every
// token generated over the wall time, prefill included.
func (a *specArm) runAtOnce(tb testing.TB, prompts []string, gen int) {
	tb.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	toks := 0
	t0 := time.Now()
	for _, p := range prompts {
		wg.Go(func() {
			req := runnerapi.CompletionRequest{Request: runnerapi.Request{Prompt: p, MaxTokens: gen, IgnoreEOS: true, Speculative: a.spec}}
			done, err := a.completer(req, func(runnerapi.Piece) error { return nil })
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				tb.Errorf("%s: %v", a.name, err)
				return
			}
			toks += done.CompletionTokens
			a.drafted += done.DraftTokens
			a.accepted += done.AcceptedDraftTokens
		})
	}
	wg.Wait()
	a.tps += float64(toks) / time.Since(t0).Seconds()
	a.runs++
}

func (a *specArm) report(b *testing.B, base *specArm) {
	tps := a.tps / float64(a.runs)
	b.ReportMetric(tps, a.name+"-tok/s")
	line := fmt.Sprintf("%-22s %7.1f tok/s", a.name, tps)
	if base != nil && a != base {
		sp := tps / (base.tps / float64(base.runs))
		b.ReportMetric(sp, a.name+"-speedup")
		line += fmt.Sprintf("  %.2f× %s", sp, base.name)
	}
	if a.drafted > 0 {
		acc := float64(a.accepted) / float64(a.drafted)
		b.ReportMetric(acc, a.name+"-accept")
		line += fmt.Sprintf("  accepted %d of %d drafted (%.1f %%)", a.accepted, a.drafted, 100*acc)
	}
	b.Log(line)
}

// BenchmarkSpeculation is make spec-bench: speculative decoding on the
// trained KJV pair (models/kjv: a 10 M target, a 1.7 M draft), side by side
// in one run, greedy, 2 threads:
//   - one rank: plain decoding, the draft model at max 4 and at max 8
//     (adaptive below that) on its default one thread, at 4 every step,
//     and at max 4 on the target's two, on held-out prompts;
//   - the same target in F32 (converted here), plain and the draft at
//     max 4 and 8: a pass that reads its weights from memory, where the
//     F16 target's 20 MB are nearly all in this machine's caches;
//   - one rank, a repetitive task (a passage, then the passage again with
//     edits, to be continued): plain, and prompt lookup;
//   - one rank with 4 slots, the prompts 4 at once: plain, the draft and
//     prompt lookup (aggregate tok/s, prefill included);
//   - a 3-rank pipeline (runner servers in this process, their rank links
//     through delay proxies adding 1 ms each way): plain and the draft;
//   - when the llama.cpp reference is installed, llama-speculative on the
//     same files and prompts (max 4), against llama-bench's decode.
//
// $ORRERY_SPEC_BENCH_MODEL and $ORRERY_SPEC_BENCH_DRAFT replace the pair.
func BenchmarkSpeculation(b *testing.B) {
	target := cmpEnv("ORRERY_SPEC_BENCH_MODEL", filepath.Join(kjvDir, "kjv-target-f16.gguf"))
	draft := cmpEnv("ORRERY_SPEC_BENCH_DRAFT", filepath.Join(kjvDir, "kjv-draft-f16.gguf"))
	const gen = 96
	prompts := specPrompts(b, 8, 12)
	oneNode := func(target string, draftThreads int) *runnerapi.Client {
		s := runner.NewServer(runner.Config{ModelPath: target, Load: load, Token: "secret", Node: "node-a", DraftModelPath: draft, DraftID: "draft",
			DraftThreads: draftThreads, Options: backend.Options{Threads: 2, BatchSize: 16, KVType: "f16"}})
		if err := s.Load(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		return serve(b, s, "secret")
	}
	oneC, one2C := oneNode(target, 0), oneNode(target, 2)
	// The target in F32: its pass reads 40 MB of weights, past this
	// machine's caches, so a step's extra rows cost little; in F16 (20 MB)
	// they cost nearly a pass each here (docs/inference.md).
	f32C := oneNode(f32Copy(b, target), 0)
	// Four slots, for four requests at once (continuous batching).
	s4 := runner.NewServer(runner.Config{ModelPath: target, Load: load, Token: "secret", Node: "node-a", DraftModelPath: draft, DraftID: "draft",
		Options: backend.Options{Threads: 2, BatchSize: 64, KVType: "f16", Parallel: 4, ContextLen: 4 * 256}})
	if err := s4.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s4.Close)
	four := serve(b, s4, "secret")
	cfg, _ := tokenizerOf(b, target)
	l := cfg.Layers
	pipe := startPipelineWith(b, target, [][2]int{{0, l / 3}, {l / 3, 2 * l / 3}, {2 * l / 3, l}},
		pipeOpts{parallel: 1, threads: 2, batch: 16, kv: "f16", draft: draft, delay: time.Millisecond})
	via := func(c *runnerapi.Client) func(runnerapi.CompletionRequest, func(runnerapi.Piece) error) (*runnerapi.Done, error) {
		return func(req runnerapi.CompletionRequest, piece func(runnerapi.Piece) error) (*runnerapi.Done, error) {
			return c.Complete(context.Background(), req, piece)
		}
	}
	draft4, draft8 := &runnerapi.Speculation{Draft: "draft", Max: 4}, &runnerapi.Speculation{Draft: "draft", Max: 8}
	plain := &specArm{name: "plain", completer: via(oneC)}
	// fixed4 drafts 4 every step, as llama-speculative does: its
	// acceptance is the pair's, where adaptive K's depends on the K it
	// chose (short drafts are accepted more often).
	fixed4 := &runnerapi.Speculation{Draft: "draft", Max: 4, Min: 4}
	arms := []*specArm{plain, {name: "draft-max4", spec: draft4, completer: via(oneC)}, {name: "draft-max8", spec: draft8, completer: via(oneC)},
		{name: "draft-fixed4", spec: fixed4, completer: via(oneC)}, {name: "draft-2threads-max4", spec: draft4, completer: via(one2C)}}
	f32Plain := &specArm{name: "f32-plain", completer: via(f32C)}
	f32Arms := []*specArm{f32Plain, {name: "f32-draft-max4", spec: draft4, completer: via(f32C)}, {name: "f32-draft-max8", spec: draft8, completer: via(f32C)}}
	rep, passage := repetitive(b)
	repPlain := &specArm{name: "repeat-plain", completer: via(oneC)}
	repArms := []*specArm{repPlain, {name: "repeat-ngram-max8", spec: &runnerapi.Speculation{Draft: "ngram", Max: 8}, completer: via(oneC)}}
	batchPlain := &specArm{name: "4-at-once-plain", completer: via(four)}
	batchArms := []*specArm{batchPlain, {name: "4-at-once-draft-max4", spec: draft4, completer: via(four)},
		{name: "4-at-once-ngram-max4", spec: &runnerapi.Speculation{Draft: "ngram", Max: 4}, completer: via(four)}}
	pipePlain := &specArm{name: "pipe3-1ms-plain", completer: via(pipe.client)}
	pipeArms := []*specArm{pipePlain, {name: "pipe3-1ms-draft-max8", spec: draft8, completer: via(pipe.client)}}
	plain.run(b, prompts[:1], 8) // warm the weights
	// Arms take turns prompt by prompt, so that this VM's drift (a sixth
	// between runs) falls on each alike.
	for b.Loop() {
		for _, p := range prompts {
			for _, a := range arms {
				a.run(b, []string{p}, gen)
			}
			for _, a := range f32Arms {
				a.run(b, []string{p}, gen)
			}
		}
		for _, a := range repArms {
			a.run(b, []string{rep}, gen)
		}
		for i := 0; i < len(prompts); i += 4 {
			for _, a := range batchArms {
				a.runAtOnce(b, prompts[i:i+4], gen)
			}
		}
		for _, p := range prompts {
			for _, a := range pipeArms {
				a.run(b, []string{p}, gen)
			}
		}
	}
	b.Logf("target %s, draft %s; %d held-out prompts × %d tokens, greedy, 2 threads", target, draft, len(prompts), gen)
	for _, a := range arms {
		a.report(b, plain)
	}
	for _, a := range f32Arms {
		a.report(b, f32Plain)
	}
	for _, a := range repArms {
		a.report(b, repPlain)
	}
	for _, a := range batchArms {
		a.report(b, batchPlain)
	}
	if a := repArms[1]; a.text != repPlain.text { // greedy: lookup changes the speed, never the text
		b.Fatalf("%s wrote %q, plain greedy %q", a.name, a.text, repPlain.text)
	}
	n, of := copied(repPlain.text, passage)
	b.ReportMetric(float64(n), "repeat-copied-words")
	b.Logf("the target, greedy, went on with the passage word for word for %d of its %d words left: prompt lookup gains where the output repeats the prompt or itself", n, of)
	for _, a := range pipeArms {
		a.report(b, pipePlain)
	}
	llamaSpeculative(b, target, draft, prompts, gen)
}

// repetitive is the prompt lookup task: a held-out passage of about 95
// tokens (the ninth chapter's first 75 words), then the same passage with a
// few words changed, cut after its first 10 words for the model to
// continue. A target that copies can copy most of the 96 tokens asked
// for. rest is the passage's words after those 10: what copying would give.
func repetitive(tb testing.TB) (prompt string, rest []string) {
	p := specPrompts(tb, 9, 75)[8]
	edited := strings.NewReplacer(" the ", " that ", " and ", " & ").Replace(p)
	return p + "\n" + strings.Join(strings.Fields(edited)[:10], " "), strings.Fields(p)[10:]
}

// copied is how many of rest's words out begins with, and len(rest).
func copied(out string, rest []string) (n, of int) {
	for i, w := range strings.Fields(out) {
		if i >= len(rest) || w != rest[i] {
			return i, len(rest)
		}
	}
	return min(len(strings.Fields(out)), len(rest)), len(rest)
}

// f32Copy writes a copy of the GGUF model at path with its F16 tensors in
// F32 into a temporary directory, and returns its path.
func f32Copy(tb testing.TB, path string) string {
	tb.Helper()
	f, raw := readGGUF(tb, path)
	var ts []gguf.WriteTensor
	for _, t := range f.Tensors {
		data := tensorData(f, raw, t)
		nt := gguf.WriteTensor{Name: t.Name, Type: t.Type, Dims: t.Dims}
		if t.Type == gguf.F16 {
			out := make([]byte, 0, 2*len(data))
			for i := 0; i < len(data); i += 2 {
				v := gguf.F16ToFloat32(binary.LittleEndian.Uint16(data[i:]))
				out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
			}
			nt.Type, data = gguf.F32, out
		}
		nt.Data = func(w io.Writer) error { _, err := w.Write(data); return err }
		ts = append(ts, nt)
	}
	// general.file_type would name F16: say nothing rather than that.
	kvs := slices.DeleteFunc(slices.Clone(f.KV), func(kv gguf.KV) bool { return kv.Key == "general.file_type" })
	out := filepath.Join(tb.TempDir(), strings.TrimSuffix(filepath.Base(path), ".gguf")+"-f32.gguf")
	if err := gguf.WriteFile(out, kvs, ts); err != nil {
		tb.Fatal(err)
	}
	return out
}

// readGGUF reads the GGUF file at path: its directory and its bytes.
func readGGUF(tb testing.TB, path string) (*gguf.File, []byte) {
	tb.Helper()
	f, err := gguf.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return f, raw
}

// tensorData is t's data in raw, the bytes of f's file.
func tensorData(f *gguf.File, raw []byte, t gguf.TensorInfo) []byte {
	return raw[f.DataOffset+int64(t.Offset):][:t.Size]
}

func cmpEnv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// llamaSpeculative runs llama.cpp's llama-speculative on the same files and
// prompts (greedy, max 4 drafted, 2 threads) and llama-bench's decode of
// the target, and logs the acceptance and speed-up; it logs why not when
// the reference is missing.
func llamaSpeculative(b *testing.B, target, draft string, prompts []string, gen int) {
	dir := llamaref.Dir()
	bin := llamaref.Bin(dir, "llama-speculative")
	if _, err := os.Stat(bin); err != nil {
		b.Logf("llama-speculative: not installed (%v): run scripts/llama-ref.sh", err)
		return
	}
	num := func(re, s string) float64 {
		m := regexp.MustCompile(re).FindStringSubmatch(s)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	var tps, drafted, accepted float64
	for _, p := range prompts {
		out, err := exec.Command(bin, "-m", target, "-md", draft, "-p", p, "-n", strconv.Itoa(gen), "--spec-draft-n-max", "4",
			"--temp", "0", "-t", "2", "-td", "2", "-c", "256", "--ignore-eos", "-s", "1").CombinedOutput()
		s := string(out)
		t, d, a := num(`decoded +\d+ tokens in +[\d.]+ seconds, speed: +([\d.]+) t/s`, s), num(`n_drafted = (\d+)`, s), num(`n_accept += (\d+)`, s)
		if err != nil || t < 0 || d < 0 || a < 0 {
			b.Fatalf("llama-speculative: %v\n%s", err, s)
		}
		tps, drafted, accepted = tps+t/float64(len(prompts)), drafted+d, accepted+a
	}
	out, err := exec.Command(llamaref.Bin(dir, "llama-bench"), "-m", target, "-p", "0", "-n", strconv.Itoa(gen), "-t", "2", "-r", "3", "-o", "csv").CombinedOutput()
	base := -1.0
	if m := regexp.MustCompile(`,"?([\d.]+)"?,"?[\d.]+"?\s*$`).FindStringSubmatch(strings.TrimSpace(string(out))); err == nil && m != nil {
		base, _ = strconv.ParseFloat(m[1], 64)
	}
	b.ReportMetric(tps, "llama-draft-max4-tok/s")
	b.ReportMetric(accepted/max(drafted, 1), "llama-draft-max4-accept")
	line := fmt.Sprintf("%-22s %7.1f tok/s  accepted %.0f of %.0f drafted (%.1f %%)", "llama-speculative max4", tps, accepted, drafted, 100*accepted/max(drafted, 1))
	if base > 0 {
		b.ReportMetric(base, "llama-plain-tok/s")
		b.ReportMetric(tps/base, "llama-draft-max4-speedup")
		line += fmt.Sprintf("; llama-bench tg%d %.1f tok/s: %.2f×", gen, base, tps/base)
	} else {
		line += fmt.Sprintf("; llama-bench gave no decode figure: %v %.300s", err, out)
	}
	b.Log(line)
}

// serve serves s's API on loopback and returns a client for it.
func serve(tb testing.TB, s *runner.Server, token string) *runnerapi.Client {
	hs := httptest.NewServer(s.Handler())
	tb.Cleanup(hs.Close)
	return &runnerapi.Client{Addr: strings.TrimPrefix(hs.URL, "http://"), Token: token}
}

func TestCopied(t *testing.T) {
	rest := strings.Fields("of Levi, shall have no part")
	for _, c := range []struct {
		out  string
		want int
	}{{" of Levi, shall have no part nor", 6}, {" of Levi, and the children", 2}, {"", 0}, {" of Levi,", 2}, {" the LORD", 0}} {
		if n, of := copied(c.out, rest); n != c.want || of != 6 {
			t.Errorf("copied(%q) = %d of %d, want %d of 6", c.out, n, of, c.want)
		}
	}
}

// TestF32Copy: spec-bench's F32 target holds the F16 target's weights
// exactly, each tensor F32 where it was F16.
func TestF32Copy(t *testing.T) {
	src := filepath.Join(kjvDir, "kjv-draft-f16.gguf") // the small one: the same code as the target's
	a, rawA := readGGUF(t, src)
	b, rawB := readGGUF(t, f32Copy(t, src))
	if len(a.Tensors) != len(b.Tensors) {
		t.Fatalf("%d tensors, the copy %d", len(a.Tensors), len(b.Tensors))
	}
	f16 := 0
	for i, ta := range a.Tensors {
		tb, want := b.Tensors[i], ta.Type
		if want == gguf.F16 {
			want = gguf.F32
		}
		if ta.Name != tb.Name || !slices.Equal(ta.Dims, tb.Dims) || tb.Type != want {
			t.Fatalf("tensor %d: %s %v %s, the copy's %s %v %s", i, ta.Name, ta.Dims, ta.Type, tb.Name, tb.Dims, tb.Type)
		}
		if ta.Type != gguf.F16 {
			continue
		}
		f16++
		n := int(ta.Elements())
		va, err := gguf.Dequantize(ta.Type, tensorData(a, rawA, ta), n)
		if err != nil {
			t.Fatal(err)
		}
		vb, err := gguf.Dequantize(tb.Type, tensorData(b, rawB, tb), n)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(va, vb) {
			t.Fatalf("%s: the copy's values differ", ta.Name)
		}
	}
	if f16 == 0 {
		t.Fatal("no F16 tensor in the draft: the test checks nothing")
	}
}
