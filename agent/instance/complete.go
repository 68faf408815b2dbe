package instance

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/tokenizer"
	"github.com/orrery-cluster/orrery/engine/trace"
)

// Complete runs a completion on this node's rank 0 and, when traced,
// ships its spans to the master and announces the task with every rank
// (the other ranks' nodes ship theirs).
func (m *Manager) Complete(ctx context.Context, instanceID, traceID string, req runnerapi.Request, onPiece func(runnerapi.Piece) error) (*runnerapi.Done, error) {
	done, err := m.cfg.Runners.Complete(ctx, instanceID, runnerapi.CompletionRequest{Request: req, TraceID: traceID}, onPiece)
	if traceID != "" {
		var spans []trace.Span
		var counters []trace.CounterSample
		errText := ""
		if done != nil {
			spans, counters = done.Spans, done.Counters
		}
		if err != nil {
			errText = err.Error()
		}
		var ranks []state.ShardRange
		if in, ok := m.cfg.Store.State().Instances[instanceID]; ok {
			ranks = in.Ranks // every rank records, a tensor-parallel group's followers too
		}
		m.cfg.ShipTrace(traceID, "chat", spans, counters, ranks, truncate(errText, 1024))
	}
	if err != nil && done != nil && len(done.Spans) == 0 && done.CompletionTokens == 0 {
		done = nil
	}
	return done, err
}

// Embed runs an embedding request on this node's rank 0; when traced, its
// rank 0 spans become a one-rank trace of kind "embed" (the other ranks
// record none for embeddings).
func (m *Manager) Embed(ctx context.Context, instanceID, traceID string, req runnerapi.EmbedRequest) (*runnerapi.EmbedResponse, error) {
	req.TraceID = traceID
	res, err := m.cfg.Runners.Embed(ctx, instanceID, req)
	if traceID != "" && res != nil {
		m.cfg.ShipTrace(traceID, "embed", res.Spans, res.Counters, nil, "")
		res.Spans, res.Counters = nil, nil
	}
	return res, err
}

// vocabCache keeps the tokenizers /tokenize and /detokenize use, read
// from the models' GGUF headers once per file version.
type vocabCache struct {
	mu sync.Mutex // guards m
	m  map[string]vocabEntry
}

// vocabEntry is a tokenizer (safe for concurrent use) and the file
// version it was read from.
type vocabEntry struct {
	path string
	mod  time.Time
	tok  *tokenizer.Tokenizer
}

// maxVocabCache bounds the cached tokenizers (a large vocabulary is tens
// of MB).
const maxVocabCache = 4

// Vocab returns the tokenizer of a model this node has on disk.
func (m *Manager) Vocab(modelID string) (api.Vocab, error) {
	e, ok := m.cfg.Models.Find(modelID)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not on node %s", api.ErrNotHere, modelID, m.cfg.Self)
	}
	if e.Error != "" {
		return nil, fmt.Errorf("%w: %s cannot be read here: %s", api.ErrModelNotFound, modelID, e.Error)
	}
	c := &m.vocabs
	c.mu.Lock()
	defer c.mu.Unlock()
	if ce, ok := c.m[modelID]; ok && ce.path == e.Path && ce.mod.Equal(e.ModTime) {
		return ce.tok, nil
	}
	f, err := gguf.ReadFile(e.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", modelID, err)
	}
	tok, err := tokenizer.New(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s has no usable tokenizer: %v", api.ErrModelNotFound, modelID, err)
	}
	if c.m == nil || len(c.m) >= maxVocabCache {
		c.m = map[string]vocabEntry{}
	}
	c.m[modelID] = vocabEntry{path: e.Path, mod: e.ModTime, tok: tok}
	return tok, nil
}
