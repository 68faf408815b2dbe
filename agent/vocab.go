package agent

import (
	"fmt"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
)

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
	tok  *model.Tokenizer
}

// maxVocabCache bounds the cached tokenizers (a large vocabulary is tens
// of MB).
const maxVocabCache = 4

// Vocab returns the tokenizer of a model this node has on disk.
func (v inference) Vocab(modelID string) (api.Vocab, error) {
	a := v.a
	e, ok := a.models.Find(modelID)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not on node %s", api.ErrNotHere, modelID, a.identity.NodeID)
	}
	if e.Error != "" {
		return nil, fmt.Errorf("%w: %s cannot be read here: %s", api.ErrModelNotFound, modelID, e.Error)
	}
	c := &a.vocabs
	c.mu.Lock()
	defer c.mu.Unlock()
	if ce, ok := c.m[modelID]; ok && ce.path == e.Path && ce.mod.Equal(e.ModTime) {
		return ce.tok, nil
	}
	f, err := gguf.ReadFile(e.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", modelID, err)
	}
	tok, err := model.NewTokenizer(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s has no usable tokenizer: %v", api.ErrModelNotFound, modelID, err)
	}
	if c.m == nil || len(c.m) >= maxVocabCache {
		c.m = map[string]vocabEntry{}
	}
	c.m[modelID] = vocabEntry{path: e.Path, mod: e.ModTime, tok: tok}
	return tok, nil
}
