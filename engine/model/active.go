package model

import (
	"fmt"
	"strings"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// ActiveBytes is how many weight bytes one decoded token reads: every
// tensor, except that a mixture of experts reads only its ExpertsUsed of
// Experts experts, the token embeddings one row (unless they are also
// the output head), and no multi-token-prediction block (glm4moe's, which
// Orrery does not compute). Decode speed tracks this, not the file size:
// memory bandwidth / ActiveBytes bounds a bandwidth-bound decode.
func ActiveBytes(f *gguf.File, c Config) uint64 {
	var n uint64
	for _, t := range f.Tensors {
		var blk int
		switch _, err := fmt.Sscanf(t.Name, "blk.%d.", &blk); {
		case err == nil && blk >= c.Layers:
			// glm4moe's multi-token-prediction blocks: not computed.
		case c.Experts > 0 && (strings.HasSuffix(t.Name, "_exps.weight") || strings.HasSuffix(t.Name, "_exps.bias")):
			n += t.Size * uint64(c.ExpertsUsed) / uint64(c.Experts)
		case t.Name == "token_embd.weight" && !c.TiedOutput && len(t.Dims) == 2 && t.Dims[1] > 0:
			n += t.Size / t.Dims[1]
		default:
			n += t.Size
		}
	}
	return n
}
