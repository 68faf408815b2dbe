package model

import (
	"fmt"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// Pooling is how an embedding model turns a text's hidden states (after
// the output norm) into one vector: llama.cpp's llama_pooling_type, read
// from <arch>.pooling_type. The vector is then L2-normalised.
type Pooling string

const (
	// PoolNone: no pooling key (or 0): a chat model, which serves no
	// embeddings.
	PoolNone Pooling = ""
	// PoolMean averages every position's hidden state.
	PoolMean Pooling = "mean"
	// PoolCLS takes the first position's (BERT's [CLS]).
	PoolCLS Pooling = "cls"
	// PoolLast takes the last position's (Qwen3-Embedding, whose
	// tokenizer appends EOS).
	PoolLast Pooling = "last"
	// PoolRank is a reranker's classification head, which Orrery does not
	// compute: such a model serves no embeddings.
	PoolRank Pooling = "rank"
)

// poolingTypes are llama.cpp's LLAMA_POOLING_TYPE values.
var poolingTypes = map[uint64]Pooling{0: PoolNone, 1: PoolMean, 2: PoolCLS, 3: PoolLast, 4: PoolRank}

// ParsePooling is a pooling by name, as gen-model's --pooling takes it:
// none, mean, cls or last.
func ParsePooling(s string) (Pooling, error) {
	switch p := Pooling(s); p {
	case "none":
		return PoolNone, nil
	case PoolMean, PoolCLS, PoolLast:
		return p, nil
	}
	return PoolNone, fmt.Errorf("pooling %q: want none, mean, cls or last", s)
}

// GGUFValue is the pooling's <arch>.pooling_type value.
func (p Pooling) GGUFValue() uint32 {
	for v, q := range poolingTypes {
		if q == p {
			return uint32(v)
		}
	}
	return 0
}

// readPooling reads <arch>.pooling_type, and refuses bidirectional
// attention (<arch>.attention.causal false, as EmbeddingGemma's), which
// Orrery's causal blocks would compute wrongly.
func readPooling(c *Config, f *gguf.File) error {
	k := c.Arch + ".pooling_type"
	if v, ok := f.Get(k); ok {
		n := f.Uint(k, 1<<32)
		p, known := poolingTypes[n]
		if !known {
			return fmt.Errorf("%s model: %s = %v: want 0 (none), 1 (mean), 2 (cls), 3 (last) or 4 (rank)", c.Arch, k, v)
		}
		c.Pooling = p
	}
	if _, ok := f.Get(c.Arch + ".attention.causal"); ok && !f.Bool(c.Arch+".attention.causal", true) {
		return fmt.Errorf("%s model: %s.attention.causal = false: bidirectional attention is not supported", c.Arch, c.Arch)
	}
	return nil
}

// EmbeddingError says why the model serves no embeddings (nil when it
// does): a chat model without a pooling type, or a reranker.
func (c Config) EmbeddingError() error {
	switch c.Pooling {
	case PoolMean, PoolCLS, PoolLast:
		return nil
	case PoolRank:
		return fmt.Errorf("%s is a reranker (%s.pooling_type rank), not an embedding model", c.nameOrArch(), c.Arch)
	}
	return fmt.Errorf("%s is not an embedding model: its GGUF sets no %s.pooling_type (a chat model)", c.nameOrArch(), c.Arch)
}

func (c Config) nameOrArch() string {
	if c.Name != "" {
		return fmt.Sprintf("%q (%s)", c.Name, c.Arch)
	}
	return "this " + c.Arch + " model"
}
