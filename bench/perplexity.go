package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runner"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
)

// PerplexityReport is orrery perplexity's result, computed as
// llama-perplexity computes it (see Perplexity).
type PerplexityReport struct {
	Model      string  `json:"model"`
	Tokens     int     `json:"tokens"`
	Ctx        int     `json:"ctx"`
	Chunks     int     `json:"chunks"`
	Scored     int     `json:"scored"`
	Perplexity float64 `json:"perplexity"`
	// StdErr is llama-perplexity's "+/-": the standard error of the mean
	// negative log-likelihood, carried through exp.
	StdErr float64 `json:"stdErr"`
}

// Perplexity scores text with the model at path as llama-perplexity does
// (its default, non-strided mode): the text is tokenized with BOS, cut into
// chunks of nCtx tokens (the remainder dropped), each chunk's first token
// replaced by BOS and evaluated on a fresh cache, and only the second half
// of each chunk is scored, so that every scored token has at least nCtx/2
// tokens of context (BOS first only for a model that adds BOS, as there).
// chunks > 0 stops after that many.
func Perplexity(ctx context.Context, path, text string, nCtx, chunks int, opts backend.Options, load runner.LoadFunc, progress io.Writer) (*PerplexityReport, error) {
	f, err := gguf.ReadFile(path)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.New(f)
	if err != nil {
		return nil, err
	}
	ids, err := tok.Encode(text, true)
	if err != nil {
		return nil, err
	}
	if len(ids) < 2*nCtx {
		return nil, fmt.Errorf("the text is %d tokens: at least %d (2 × the context of %d) are needed", len(ids), 2*nCtx, nCtx)
	}
	n := len(ids) / nCtx
	if chunks > 0 {
		n = min(n, chunks)
	}
	opts.ContextLen, opts.BatchSize, opts.Parallel = nCtx, nCtx, 1
	r, err := load(ctx, path, opts, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// llama-perplexity puts BOS first in every chunk when the model adds
	// one (Encode then put it first in the text).
	addBOS := len(tok.StripBOS(ids[:1])) == 0
	bos := ids[0]
	first := nCtx / 2
	rep := &PerplexityReport{Model: path, Tokens: len(ids), Ctx: nCtx, Chunks: n}
	var nll, nll2 float64
	vocab := tok.VocabSize()
	for c := range n {
		chunk := slices.Clone(ids[c*nCtx : (c+1)*nCtx])
		if addBOS {
			chunk[0] = bos
		}
		b := backend.Batch{Tokens: chunk}
		for i := range chunk {
			b.Positions = append(b.Positions, int32(i))
			if i >= first {
				b.Outputs = append(b.Outputs, int32(i))
			}
		}
		if err := r.Reset(); err != nil {
			return nil, err
		}
		res, err := r.Forward(ctx, b)
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", c, err)
		}
		if len(res.Logits) != len(b.Outputs)*vocab {
			return nil, errors.New("the model gave no logits for every output (a pipeline shard, not a whole model?)")
		}
		// Positions first..nCtx-2 predict the tokens after them.
		for i := 0; i < nCtx-1-first; i++ {
			v := -logSoftmax(res.Logits[i*vocab:(i+1)*vocab], int(chunk[first+i+1]))
			nll += v
			nll2 += v * v
		}
		rep.Scored += nCtx - 1 - first
		if progress != nil {
			fmt.Fprintf(progress, "[%d]%.4f,", c+1, math.Exp(nll/float64(rep.Scored)))
		}
	}
	if progress != nil {
		fmt.Fprintln(progress)
	}
	mean := nll / float64(rep.Scored)
	rep.Perplexity = math.Exp(mean)
	if v := nll2/float64(rep.Scored) - mean*mean; v > 0 && rep.Scored > 1 {
		rep.StdErr = math.Sqrt(v/float64(rep.Scored-1)) * rep.Perplexity
	}
	return rep, nil
}

// logSoftmax is log p(tok) under logits, as llama-perplexity computes it:
// f32 differences from the maximum, their exponentials summed in f64.
func logSoftmax(logits []float32, tok int) float64 {
	mx := logits[0]
	for _, x := range logits[1:] {
		mx = max(mx, x)
	}
	var sum float64
	for _, x := range logits {
		sum += float64(float32(math.Exp(float64(x - mx))))
	}
	return float64(logits[tok]-mx) - math.Log(sum)
}
