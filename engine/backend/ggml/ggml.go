// Package ggml runs a rank's blocks on ggml through ollama's ml packages
// (CPU here, Metal on macOS), pinned to github.com/ollama/ollama v0.17.4.
// Nothing outside this package sees that API.
package ggml

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/ollama/ollama/kvcache"
	"github.com/ollama/ollama/ml"
	_ "github.com/ollama/ollama/ml/backend/ggml" // registers the ggml backend
	"github.com/ollama/ollama/model/input"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// layer is one block's weights; the tensors an architecture does not
// have are nil (biases but for qwen2, q/k norms but for qwen3, experts
// instead of gate/up/down in a mixture of experts).
type layer struct {
	attnNorm, q, k, v, qb, kb, vb, o   ml.Tensor
	qkv                                ml.Tensor // Phi-3: q, k and v in one
	qNorm, kNorm                       ml.Tensor
	ropeFreqs                          ml.Tensor // Llama 3.x's RoPE frequency divisors
	attnPostNorm, ffnPostNorm          ml.Tensor // Gemma 3
	ffnNorm, gate, up, down            ml.Tensor
	router, gateExps, upExps, downExps ml.Tensor
	// deepseek2: multi-head latent attention (attn_q_a and its norm,
	// attn_q_b, attn_kv_a_mqa and its norm, attn_k_b, attn_v_b), shared
	// experts and the experts' selection bias.
	qDown, qDownNorm, qUp, kvDown, kvDownNorm, kAbsorb, vUp ml.Tensor
	gateSh, upSh, downSh, probsB                            ml.Tensor
	// gpt-oss: attention sinks, the output's bias, the experts' biases.
	sinks, ob                              ml.Tensor
	routerB, gateExpsB, upExpsB, downExpsB ml.Tensor
}

// Rank is a loaded range of blocks on ggml.
type Rank struct {
	cfg   model.Config
	opts  backend.Options
	b     ml.Backend
	cache kvcache.Cache
	// swa is cache when some blocks attend to a sliding window: one
	// cache for those blocks (type swaLayer), one for the global ones.
	swa *kvcache.WrapperCache

	tokEmb, outNorm, out ml.Tensor
	layers               []layer // indexed from opts.FirstLayer
	// repacked holds the weights moved to ggml's repack buffers (nil
	// when none were).
	repacked *repacker
	// Repacked counts the matrices moved there.
	Repacked int
	// group sums the partial outputs of a tensor-parallel slice's blocks
	// (nil: whole blocks).
	group *tpGroup
	// threads is bound to the process's CPU backend before each
	// computation (threadpool.go).
	threads *threads
	// gpu is what the rank put on a GPU, and offload how that came out
	// (offload.go).
	gpu     gpuPlan
	offload runnerapi.Offload
}

var _ backend.Rank = (*Rank)(nil)

// The layer types of the sliding-window cache: the order of its caches.
const (
	swaLayer = iota
	globalLayer
)

// shift re-rotates layer il's cached keys by the positions they moved
// (a context shift): RoPE of a position difference composes with the
// rotation they have.
func (r *Rank) shift(c ml.Context, il int, key, shift ml.Tensor) (ml.Tensor, error) {
	if r.cfg.MLA {
		return nil, errContextShiftMLA
	}
	return r.rope(c, il, &r.layers[il-r.opts.FirstLayer], key, r.cfg.RotaryDims(), &inputs{positions: shift}), nil
}

var errContextShiftMLA = errors.New("context shift: deepseek2's latent attention cache cannot be shifted")

func (r *Rank) Config() model.Config       { return r.cfg }
func (r *Rank) Offload() runnerapi.Offload { return r.offload }
func (r *Rank) Options() backend.Options   { return r.opts }

// Reset forgets every cached position.
func (r *Rank) Reset() error {
	defer r.threads.bind()()
	for seq := range r.opts.Parallel {
		if err := r.cache.Remove(seq, 0, math.MaxInt32); err != nil {
			return err
		}
	}
	return nil
}

// Shift drops seq's positions [keep, keep+discard) and moves the later
// ones down by discard, re-rotating their keys: llama.cpp's context shift.
func (r *Rank) Shift(seq, keep, discard int) error {
	if seq < 0 || seq >= r.opts.Parallel || keep < 0 || discard < 1 || keep > math.MaxInt32-discard {
		return fmt.Errorf("shift of sequence %d (of %d): keep %d, discard %d", seq, r.opts.Parallel, keep, discard)
	}
	defer r.threads.bind()() // the shift computes
	switch {
	case r.cfg.MLA:
		return errContextShiftMLA
	case r.cfg.SlidingWindow > 0:
		// ollama's sliding-window cache crashes in ggml when shifted.
		return errors.New("context shift: sliding-window caches (gemma3, gpt-oss) cannot be shifted")
	}
	return r.cache.Remove(seq, int32(keep), int32(keep+discard))
}

// Remove forgets seq's positions from `from` on. A sliding-window cache
// may no longer hold the window that position needs: then it forgets the
// whole sequence and says so (ErrCannotKeep).
func (r *Rank) Remove(seq, from int) error {
	if seq < 0 || seq >= r.opts.Parallel || from < 0 || from > math.MaxInt32 {
		return fmt.Errorf("remove of sequence %d (of %d) from position %d", seq, r.opts.Parallel, from)
	}
	defer r.threads.bind()()
	if from > 0 && !r.cache.CanResume(seq, int32(from)) {
		if err := r.cache.Remove(seq, 0, math.MaxInt32); err != nil {
			return err
		}
		return fmt.Errorf("%w: sequence %d from position %d", backend.ErrCannotKeep, seq, from)
	}
	return r.cache.Remove(seq, int32(from), math.MaxInt32)
}

// Close frees the weights and the cache.
func (r *Rank) Close() {
	if r.cache != nil {
		r.cache.Close()
	}
	r.b.Close()
	r.threads.close()
	r.repacked.close()
	r.group.close()
}

// repack moves the matrices ggml's CPU kernels can use repacked (see
// repack.go) into repack buffers, when this machine and build allow.
func (r *Rank) repack(f *gguf.File) error {
	type weight struct {
		name string
		t    ml.Tensor
	}
	var ws []weight
	if r.out != nil && !r.cfg.TiedOutput {
		ws = append(ws, weight{"output.weight", r.out})
	}
	for i := range r.layers {
		l := &r.layers[i]
		p := fmt.Sprintf("blk.%d.", r.opts.FirstLayer+i)
		for _, w := range []struct {
			s string
			t ml.Tensor
		}{{"attn_q", l.q}, {"attn_k", l.k}, {"attn_v", l.v}, {"attn_qkv", l.qkv}, {"attn_output", l.o}, {"ffn_gate", l.gate}, {"ffn_up", l.up}, {"ffn_down", l.down},
			{"ffn_gate_exps", l.gateExps}, {"ffn_up_exps", l.upExps}, {"ffn_down_exps", l.downExps},
			// deepseek2's 2D matrices; ggml repacks no 3D matmul weight
			// (attn_k_b, attn_v_b), as llama.cpp's supports_op says.
			{"attn_q_a", l.qDown}, {"attn_q_b", l.qUp}, {"attn_kv_a_mqa", l.kvDown},
			{"ffn_gate_shexp", l.gateSh}, {"ffn_up_shexp", l.upSh}, {"ffn_down_shexp", l.downSh}} {
			if w.t != nil {
				ws = append(ws, weight{p + w.s + ".weight", w.t})
			}
		}
	}
	var todo []weight
	for _, w := range ws {
		if ti, ok := f.Tensor(w.name); ok && repackable(*ti) {
			todo = append(todo, w)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	rp := newRepacker(len(todo))
	if rp == nil {
		return nil
	}
	r.repacked = rp
	for _, w := range todo {
		if err := rp.move(w.t); err != nil {
			return fmt.Errorf("repack %s: %w", w.name, err)
		}
		r.Repacked++
	}
	return nil
}

// loadHead takes the output norm and head: output.weight (this rank's
// rows of it, split by vocabulary) or the tied embeddings.
func (r *Rank) loadHead(must func(string) ml.Tensor) error {
	cfg := r.cfg
	r.outNorm = must("output_norm.weight")
	switch {
	case cfg.TiedOutput && r.gpu.head:
		// ollama copies the embeddings as output.weight onto the head's
		// device (the embeddings stay on the CPU).
		r.out = r.b.Get("output.weight")
		if r.out == nil {
			r.out = must("token_embd.weight")
		}
	case cfg.TiedOutput:
		r.out = must("token_embd.weight")
	default:
		r.out = must("output.weight")
	}
	rows := cfg.Vocab
	if cfg.TP != nil && cfg.TP.VocabRows > 0 && !cfg.TiedOutput {
		rows = cfg.TP.VocabRows
	}
	if r.out != nil && r.out.Dim(1) != rows {
		return fmt.Errorf("the output head has %d rows, want %d", r.out.Dim(1), rows)
	}
	return nil
}

// Forward runs one batch through the rank's blocks.
func (r *Rank) Forward(ctx context.Context, in backend.Batch) (res backend.Result, err error) {
	n := len(in.Positions)
	first, last := r.opts.FirstLayer == 0, r.opts.LastLayer == r.cfg.Layers
	if r.group != nil {
		r.group.take() // a failed pass's error was returned with it
	}
	defer r.threads.bind()()
	switch {
	case n == 0 || n > r.opts.BatchSize:
		return res, fmt.Errorf("batch of %d positions, want 1..%d", n, r.opts.BatchSize)
	case first && len(in.Tokens) != n:
		return res, fmt.Errorf("%d tokens for %d positions", len(in.Tokens), n)
	case !first && len(in.Hidden) != n*r.cfg.Dim:
		return res, fmt.Errorf("%d hidden values for %d positions of dim %d", len(in.Hidden), n, r.cfg.Dim)
	}
	for _, t := range in.Tokens {
		if t < 0 || int(t) >= r.cfg.Vocab {
			return res, fmt.Errorf("token %d outside the %d-token vocabulary", t, r.cfg.Vocab)
		}
	}
	seqs := in.Seqs
	if seqs == nil {
		seqs = make([]int, n)
	}
	if err := r.checkRows(in, seqs); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("ggml forward: %v", p)
		}
	}()
	c := r.b.NewContext()
	defer c.Close()
	ins := inputs{positions: c.Input().FromInts(in.Positions, n), n: n}
	if r.cfg.AttnTempScale != 0 {
		scales := make([]float32, n)
		for i, p := range in.Positions {
			scales[i] = r.cfg.AttnTemp(p)
		}
		ins.attnTemp = c.Input().FromFloats(scales, 1, 1, n)
	}
	var h ml.Tensor
	if first {
		h = r.tokEmb.Rows(c, c.Input().FromInts(in.Tokens, n))
		if r.cfg.EmbedScale {
			h = h.Scale(c, float64(float32(math.Sqrt(float64(r.cfg.Dim)))))
		}
	} else {
		h = c.Input().FromFloats(in.Hidden, r.cfg.Dim, n)
	}
	if err := r.cache.StartForward(c, input.Batch{Positions: in.Positions, Sequences: seqs}, false); err != nil {
		return res, fmt.Errorf("kv cache: %w", err)
	}
	for i := range r.layers {
		il := r.opts.FirstLayer + i
		r.cache.SetLayer(il)
		if r.swa != nil {
			typ := globalLayer
			if r.cfg.IsSWA(il) {
				typ = swaLayer
			}
			r.swa.SetLayerType(typ)
		}
		h = r.block(c, il, &r.layers[i], h, &ins)
	}
	if !last || r.out == nil {
		// A tensor-parallel rank other than 0 with the head whole on rank
		// 0 ends here too: its hidden state is rank 0's (the last sum
		// made them equal).
		c.Forward(h).Compute(h)
		hidden := h.Floats()
		if err := r.groupErr(); err != nil {
			return res, err
		}
		if !last {
			res.Hidden = hidden
		}
		return res, nil
	}
	return r.outputs(c, h, in)
}

// outputs computes the last rank's results from the final hidden states h
// (one per row): the normed rows of in.Embeds and the logits of the output
// rows, in one graph.
func (r *Rank) outputs(c ml.Context, h ml.Tensor, in backend.Batch) (res backend.Result, err error) {
	n := len(in.Positions)
	var emb ml.Tensor
	if len(in.Embeds) > 0 {
		emb = r.embeds(c, h, in.Embeds)
	}
	switch {
	case in.AllLogits:
	case in.Outputs != nil && len(in.Outputs) == 0: // no logits wanted
		if emb == nil { // a tensor-parallel follower: the leader pools
			c.Forward(h).Compute(h)
			return res, r.groupErr()
		}
		c.Forward(emb).Compute(emb)
		res.Embeds = emb.Floats()
		return res, r.groupErr()
	case in.Outputs != nil:
		if len(in.Outputs) != n || !sequential(in.Outputs) {
			h = h.Rows(c, c.Input().FromInts(in.Outputs, len(in.Outputs)))
		}
	case n > 1:
		h = h.Rows(c, c.Input().FromInts([]int32{int32(n - 1)}, 1))
	}
	res.Logits, err = r.head(c, h, emb)
	if emb != nil && err == nil {
		res.Embeds = emb.Floats()
	}
	return res, err
}

// head applies the output norm and head to the output rows h: the whole
// head, or (split by vocabulary in a tensor-parallel group) this rank's
// rows of it, then the group's rows gathered. also (nil: none) is computed
// in the same graph.
func (r *Rank) head(c ml.Context, h, also ml.Tensor) ([]float32, error) {
	h = h.RMSNorm(c, r.outNorm, float32(r.cfg.Eps))
	out, split := r.out, r.cfg.TP != nil && r.cfg.TP.VocabRows > 0
	if split && r.cfg.TiedOutput { // the rank's rows of the embeddings
		out = out.View(c, r.cfg.TP.VocabFirst*out.Stride(1), out.Dim(0), out.Stride(1), r.cfg.TP.VocabRows)
	}
	logits := out.Mulmat(c, h)
	if also != nil {
		c.Forward(logits, also).Compute(logits, also)
	} else {
		c.Forward(logits).Compute(logits)
	}
	v := logits.Floats()
	if err := r.groupErr(); err != nil {
		return nil, err
	}
	if split {
		v = r.gatherLogits(v)
		if err := r.groupErr(); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// gatherLogits makes every rank's rows of the head's output (a
// tensor-parallel group with the head split by vocabulary) the whole
// vocabulary's: each rank puts its rows in place among zeros and the
// group sums them, which adds only zeros to each logit (the same bits;
// exactly, in f32, whatever the group's wire).
func (r *Rank) gatherLogits(part []float32) []float32 {
	s, vocab := r.cfg.TP, r.cfg.Vocab
	n := len(part) / s.VocabRows
	full := make([]float32, n*vocab)
	for i := range n {
		copy(full[i*vocab+s.VocabFirst:], part[i*s.VocabRows:(i+1)*s.VocabRows])
	}
	r.group.reduce(full, true)
	return full
}

// groupErr is the error of the pass's all-reduces, if any.
func (r *Rank) groupErr() error {
	if r.group == nil {
		return nil
	}
	if err := r.group.take(); err != nil {
		return fmt.Errorf("tensor-parallel all-reduce: %w", err)
	}
	return nil
}

// checkRows checks a batch's sequences, positions and output rows.
func (r *Rank) checkRows(in backend.Batch, seqs []int) error {
	n := len(in.Positions)
	if len(seqs) != n {
		return fmt.Errorf("%d sequence ids for %d positions", len(seqs), n)
	}
	for i, p := range in.Positions {
		if p < 0 || int(p) >= r.opts.ContextLen {
			return fmt.Errorf("position %d outside the context of %d", p, r.opts.ContextLen)
		}
		if seqs[i] < 0 || seqs[i] >= r.opts.Parallel {
			return fmt.Errorf("sequence %d of %d", seqs[i], r.opts.Parallel)
		}
	}
	for _, o := range in.Outputs {
		if o < 0 || int(o) >= n {
			return fmt.Errorf("output row %d of %d", o, n)
		}
	}
	for _, o := range in.Embeds {
		if o < 0 || int(o) >= n {
			return fmt.Errorf("embedding row %d of %d", o, n)
		}
	}
	return nil
}

// embeds is the output norm of rows of h: the hidden states an
// embedding model pools (llama.cpp's result_norm).
func (r *Rank) embeds(c ml.Context, h ml.Tensor, rows []int32) ml.Tensor {
	if len(rows) != h.Dim(1) || !sequential(rows) {
		h = h.Rows(c, c.Input().FromInts(rows, len(rows)))
	}
	return h.RMSNorm(c, r.outNorm, float32(r.cfg.Eps))
}

// sequential reports rows 0, 1, 2, …
func sequential(rows []int32) bool {
	for i, o := range rows {
		if int(o) != i {
			return false
		}
	}
	return true
}
