package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/engine/grammar"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Embeddings. An embedding job is a prompt the scheduler feeds like any
// other (in chunks, batched with other slots' rows) on a fresh cache, whose
// rows the last rank keeps after the output norm and pools as the model's
// pooling type says (mean, first or last position), then L2-normalises:
// llama.cpp's llama-embedding. Nothing is generated.

// PrepareEmbed checks an embedding request against the model and
// tokenizes its inputs.
func (g *Generator) PrepareEmbed(cfg model.Config, req *runnerapi.EmbedRequest) ([][]int32, error) {
	if err := cfg.EmbeddingError(); err != nil {
		return nil, fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
	}
	switch n := len(req.Inputs); {
	case n == 0:
		return nil, fmt.Errorf("%w: no inputs", runnerapi.ErrBadRequest)
	case n > runnerapi.MaxEmbedInputs:
		return nil, fmt.Errorf("%w: %d inputs, at most %d in one request", runnerapi.ErrBadRequest, n, runnerapi.MaxEmbedInputs)
	}
	if req.Dimensions < 0 || req.Dimensions > cfg.Dim {
		return nil, fmt.Errorf("%w: dimensions %d: this model's vectors have 1..%d", runnerapi.ErrBadRequest, req.Dimensions, cfg.Dim)
	}
	ctxLen := g.M.Options().ContextLen
	out := make([][]int32, len(req.Inputs))
	for i, in := range req.Inputs {
		ids := in.Tokens
		if len(ids) > 0 {
			if err := g.checkTokens(fmt.Sprintf("input %d: token", i), ids); err != nil {
				return nil, err
			}
		} else {
			var err error
			if ids, err = g.Tok.Encode(in.Text, true); err != nil {
				return nil, fmt.Errorf("%w: input %d: tokenize: %v", runnerapi.ErrBadRequest, i, err)
			}
		}
		switch {
		case len(ids) == 0:
			return nil, fmt.Errorf("%w: input %d has no tokens", runnerapi.ErrBadRequest, i)
		case len(ids) > ctxLen && req.Truncate:
			ids = ids[:ctxLen]
		case len(ids) > ctxLen:
			return nil, fmt.Errorf("%w: input %d is %d tokens and the context holds %d", runnerapi.ErrPromptTooLong, i, len(ids), ctxLen)
		}
		out[i] = ids
	}
	return out, nil
}

// Embed runs an embedding request's inputs (from PrepareEmbed) as jobs
// on s, which batches them with each other and with chat, and waits for
// every vector. rec (nil: untraced) records rank 0's spans.
func (s *Scheduler) Embed(ctx context.Context, inputs [][]int32, rec *trace.Recorder) (runnerapi.EmbedResponse, error) {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make([]*Job, len(inputs))
	res := runnerapi.EmbedResponse{Embeddings: make([]runnerapi.Vector, len(inputs))}
	for i, ids := range inputs {
		jobs[i] = s.Submit(ctx, &runnerapi.Request{PromptTokens: ids, Embed: true}, ids, "", rec)
		res.PromptTokens += len(ids)
	}
	var first error
	for i, j := range jobs {
		r, err := j.Wait(func(runnerapi.Piece) error { return nil })
		if err != nil && first == nil {
			first = fmt.Errorf("input %d: %w", i, err)
			cancel() // the others' work is wasted now
		}
		res.Embeddings[i] = r.Embedding
	}
	res.Ns = time.Since(start).Nanoseconds()
	return res, first
}

// pooler pools an embedding job's normed hidden states, row by row as its
// prompt's chunks pass the last rank.
type pooler struct {
	kind model.Pooling
	dim  int
	sum  []float64 // mean: the rows' sum
	n    int       // rows added
	pick []float32 // cls: position 0's row; last: the latest row
}

func newPooler(kind model.Pooling, dim int) *pooler {
	p := &pooler{kind: kind, dim: dim}
	if kind == model.PoolMean {
		p.sum = make([]float64, dim)
	}
	return p
}

// add takes rows (dim each) at positions start….
func (p *pooler) add(rows []float32, start int) {
	k := len(rows) / p.dim
	if k == 0 {
		return
	}
	switch p.kind {
	case model.PoolMean:
		for i, v := range rows[:k*p.dim] {
			p.sum[i%p.dim] += float64(v)
		}
	case model.PoolCLS:
		if start == 0 {
			p.pick = append(p.pick[:0], rows[:p.dim]...)
		}
	case model.PoolLast:
		p.pick = append(p.pick[:0], rows[(k-1)*p.dim:k*p.dim]...)
	}
	p.n += k
}

// vector is the pooled vector, L2-normalised (l2Normalize).
func (p *pooler) vector() ([]float32, error) {
	if p == nil {
		return nil, errors.New("an embedding group in a slot that began no embedding")
	}
	var v []float32
	switch {
	case p.n == 0:
		return nil, errors.New("embedding of no rows")
	case p.kind == model.PoolMean:
		v = make([]float32, p.dim)
		for i, x := range p.sum {
			v[i] = float32(x / float64(p.n))
		}
	case len(p.pick) == p.dim:
		v = p.pick
	default:
		return nil, fmt.Errorf("%s pooling saw no row to pick", p.kind)
	}
	return runnerapi.L2Normalize(v), nil
}

// poolGroups hands each embedding group's rows of embeds (dim per row,
// the step's embedding rows in order) to its slot's pooler.
func poolGroups(st *Step, embeds []float32, dim int, smps []slotSampler) error {
	off := 0
	for _, g := range st.Groups {
		if !g.Embed {
			continue
		}
		n := len(g.Tokens) * dim
		if off+n > len(embeds) {
			return fmt.Errorf("%d embedding values for the step's rows of dim %d", len(embeds), dim)
		}
		p := smps[g.Slot].pool
		if p == nil {
			return fmt.Errorf("slot %d: embedding rows before its job began", g.Slot)
		}
		p.add(embeds[off:off+n], g.Start)
		off += n
	}
	if off != len(embeds) {
		return fmt.Errorf("%d embedding values for %d in the step's rows", len(embeds), off)
	}
	return nil
}

// beginSlot is a slot's sampler for a new request: a pooler for an
// embedding job (which the model must pool), else a sampler.
func beginSlot(embed bool, cfg model.Config, opts sample.Options, spec *grammar.Spec, tok *tokenizer.Tokenizer, nlp int) (slotSampler, error) {
	if embed {
		if err := cfg.EmbeddingError(); err != nil {
			return slotSampler{}, fmt.Errorf("%w: %v", runnerapi.ErrBadRequest, err)
		}
		return slotSampler{pool: newPooler(cfg.Pooling, cfg.Dim), nlp: -1}, nil
	}
	return newSlotSampler(opts, spec, tok, nlp)
}
