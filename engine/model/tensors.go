package model

// The tensors a forward pass needs, checked against the metadata.

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// readShard reads which blocks [first, last) the file holds, and whether the
// output projection is tied to the embeddings.
func readShard(c *Config, f *gguf.File) (first, last int, err error) {
	first, last = 0, c.Layers
	if _, ok := f.Get(KeyShardLast); ok {
		first, last = int(f.Uint(KeyShardFirst, 0)), int(f.Uint(KeyShardLast, 0))
		if first < 0 || last > c.Layers || first >= last {
			return 0, 0, fmt.Errorf("shard of blocks [%d, %d) of a %d-layer model", first, last, c.Layers)
		}
		c.ShardFirst, c.ShardLast = first, last
		c.TiedOutput = f.Bool(KeyShardTied, false)
	} else {
		_, hasOut := f.Tensor("output.weight")
		c.TiedOutput = !hasOut
	}
	return first, last, nil
}

// checkEmbeddings checks the token embeddings (needed by the first shard, and
// by the last when the output is tied) and the output norm (needed by the
// last), and takes the vocabulary size from the embeddings if the tokenizer
// did not give it.
func checkEmbeddings(c *Config, f *gguf.File, first, last int) error {
	needEmb := first == 0 || last == c.Layers && c.TiedOutput
	emb, ok := f.Tensor("token_embd.weight")
	switch {
	case !ok && needEmb:
		return errors.New("no token_embd.weight tensor")
	case ok:
		if len(emb.Dims) != 2 || int(emb.Dims[0]) != c.Dim {
			return fmt.Errorf("token_embd.weight is %v, want [%d, vocab]", emb.Dims, c.Dim)
		}
		if c.Vocab == 0 {
			c.Vocab = int(emb.Dims[1])
		}
		if int(emb.Dims[1]) != c.Vocab {
			return fmt.Errorf("token_embd.weight has %d rows, the tokenizer %d tokens", emb.Dims[1], c.Vocab)
		}
	case c.Vocab == 0:
		return errors.New("no tokenizer.ggml.tokens and no token_embd.weight: vocabulary size unknown")
	}
	if last == c.Layers {
		if _, ok := f.Tensor("output_norm.weight"); !ok {
			return errors.New("no output_norm.weight tensor")
		}
	}
	return nil
}

// blockShapes notes whether the blocks have q/k/v biases and the model
// RoPE frequency factors, and returns the shape each block's tensors must
// have, by name suffix.
func blockShapes(c *Config, f *gguf.File, first int) (map[string][]uint64, error) {
	if c.MLA {
		return mlaShapes(c, f, first)
	}
	_, c.QKVBias = f.Tensor(fmt.Sprintf("blk.%d.attn_q.bias", first))
	if c.Arch == "glm4moe" { // only some GLM-4.5 variants have q/k norms
		_, c.QKNorm = f.Tensor(fmt.Sprintf("blk.%d.attn_q_norm.weight", first))
	}
	_, c.FusedQKV = f.Tensor(fmt.Sprintf("blk.%d.attn_qkv.weight", first))
	if c.FusedQKV && c.Arch != "phi3" {
		return nil, fmt.Errorf("%s model with blk.%d.attn_qkv.weight: a fused QKV is supported for phi3 only", c.Arch, first)
	}
	for _, name := range []string{"rope_factors_long.weight", "rope_factors_short.weight"} {
		if _, ok := f.Tensor(name); ok {
			return nil, fmt.Errorf("%s model with %s: LongRoPE (Phi-3's 128k variants) is not supported yet", c.Arch, name)
		}
	}
	if rf, ok := f.Tensor("rope_freqs.weight"); ok {
		if c.Arch != "llama" && c.Arch != "mistral3" {
			return nil, fmt.Errorf("%s model with rope_freqs.weight: RoPE frequency factors are supported for llama and mistral3 only", c.Arch)
		}
		if !slices.Equal(rf.Dims, []uint64{uint64(c.HeadDim / 2)}) || rf.Type != gguf.F32 {
			return nil, fmt.Errorf("rope_freqs.weight is %s %v, want F32 [%d]", rf.Type, rf.Dims, c.HeadDim/2)
		}
		c.RopeFreqs = true
	}
	if c.Arch == "mistral3" {
		// Biases llama.cpp takes optionally: the output's is computed,
		// the MLP's refused (no Ministral 3 has them).
		_, c.OutBias = f.Tensor(fmt.Sprintf("blk.%d.attn_output.bias", first))
		for _, name := range []string{"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"} {
			if _, ok := f.Tensor(fmt.Sprintf("blk.%d.%s", first, name)); ok {
				return nil, fmt.Errorf("%s model with blk.%d.%s: MLP biases are not supported", c.Arch, first, name)
			}
		}
	}
	dim, hd := uint64(c.Dim), uint64(c.HeadDim)
	q, kv := uint64(c.Heads)*hd, uint64(c.KVHeads)*hd
	want := map[string][]uint64{
		"attn_norm.weight": {dim}, c.FFNNorm(): {dim},
		"attn_q.weight": {dim, q}, "attn_k.weight": {dim, kv}, "attn_v.weight": {dim, kv},
		"attn_output.weight": {q, dim},
	}
	if c.FusedQKV {
		delete(want, "attn_q.weight")
		delete(want, "attn_k.weight")
		delete(want, "attn_v.weight")
		want["attn_qkv.weight"] = []uint64{dim, q + 2*kv}
	}
	if c.FusedGateUp {
		ff := uint64(c.FFDim)
		want["ffn_up.weight"], want["ffn_down.weight"] = []uint64{dim, 2 * ff}, []uint64{ff, dim}
	} else if c.Arch == "glm4moe" {
		if err := leadDenseShapes(c, f, first, want); err != nil {
			return nil, err
		}
	} else if c.Experts > 0 {
		// The router scores every expert; a slice holds some of them.
		_, local := c.LocalExperts()
		e, eff := uint64(local), uint64(c.ExpertFFDim)
		want["ffn_gate_inp.weight"] = []uint64{dim, uint64(c.Experts)}
		want["ffn_gate_exps.weight"], want["ffn_up_exps.weight"] = []uint64{dim, eff, e}, []uint64{dim, eff, e}
		want["ffn_down_exps.weight"] = []uint64{eff, dim, e}
	} else {
		ff := uint64(c.FFDim)
		want["ffn_gate.weight"], want["ffn_up.weight"], want["ffn_down.weight"] = []uint64{dim, ff}, []uint64{dim, ff}, []uint64{ff, dim}
	}
	if c.AttnSinks {
		want["attn_sinks.weight"] = []uint64{uint64(c.Heads)}
	}
	if c.OutBias {
		want["attn_output.bias"] = []uint64{dim}
	}
	if c.ExpertBiases {
		_, local := c.LocalExperts()
		e, eff := uint64(local), uint64(c.ExpertFFDim)
		want["ffn_gate_inp.bias"] = []uint64{uint64(c.Experts)}
		want["ffn_gate_exps.bias"], want["ffn_up_exps.bias"], want["ffn_down_exps.bias"] = []uint64{eff, e}, []uint64{eff, e}, []uint64{dim, e}
	}
	if c.QKNorm {
		want["attn_q_norm.weight"], want["attn_k_norm.weight"] = []uint64{hd}, []uint64{hd}
	}
	if c.PostNorms {
		want["post_attention_norm.weight"], want["post_ffw_norm.weight"] = []uint64{dim}, []uint64{dim}
	}
	if c.QKVBias {
		want["attn_q.bias"], want["attn_k.bias"], want["attn_v.bias"] = []uint64{q}, []uint64{kv}, []uint64{kv}
	}
	return want, nil
}

// mlaShapes is blockShapes for deepseek2: its attention's tensors, and a
// dense or a mixture-of-experts MLP by block (dense ones under "dense.",
// which checkBlocks strips for the leading dense blocks).
func mlaShapes(c *Config, f *gguf.File, first int) (map[string][]uint64, error) {
	dim, heads := uint64(c.Dim), uint64(c.Heads)
	kvl, rope, kd, vd := uint64(c.KVLoraRank), uint64(c.RopeDim), uint64(c.KeyDimMLA), uint64(c.ValueDimMLA)
	want := map[string][]uint64{
		"attn_norm.weight": {dim}, "ffn_norm.weight": {dim},
		"attn_kv_a_mqa.weight": {dim, kvl + rope}, "attn_kv_a_norm.weight": {kvl},
		"attn_k_b.weight": {kd - rope, kvl, heads}, "attn_v_b.weight": {kvl, vd, heads},
		"attn_output.weight": {heads * vd, dim},
	}
	if c.QLoraRank > 0 {
		ql := uint64(c.QLoraRank)
		want["attn_q_a.weight"], want["attn_q_a_norm.weight"], want["attn_q_b.weight"] = []uint64{dim, ql}, []uint64{ql}, []uint64{ql, heads * kd}
	} else {
		want["attn_q.weight"] = []uint64{dim, heads * kd}
	}
	if err := leadDenseShapes(c, f, first, want); err != nil {
		return nil, err
	}
	moe := max(first, c.LeadDense)
	if _, ok := f.Tensor(fmt.Sprintf("blk.%d.attn_kv_b.weight", moe)); ok {
		return nil, fmt.Errorf("%s model with blk.%d.attn_kv_b.weight is not supported", c.Arch, moe)
	}
	return want, nil
}

// leadDenseShapes adds deepseek2's and glm4moe's MLP tensors to want: a
// dense MLP under "dense." (the leading dense blocks'), routed and shared
// experts under "moe." (the others'), which checkBlocks tells apart.
func leadDenseShapes(c *Config, f *gguf.File, first int, want map[string][]uint64) error {
	dim, ff := uint64(c.Dim), uint64(c.FFDim)
	want["dense.ffn_gate.weight"], want["dense.ffn_up.weight"], want["dense.ffn_down.weight"] = []uint64{dim, ff}, []uint64{dim, ff}, []uint64{ff, dim}
	// The router scores every expert; a slice holds some of them.
	_, local := c.LocalExperts()
	e, eff, sh := uint64(local), uint64(c.ExpertFFDim), uint64(c.SharedFF())
	want["moe.ffn_gate_inp.weight"] = []uint64{dim, uint64(c.Experts)}
	want["moe.ffn_gate_exps.weight"], want["moe.ffn_up_exps.weight"] = []uint64{dim, eff, e}, []uint64{dim, eff, e}
	want["moe.ffn_down_exps.weight"] = []uint64{eff, dim, e}
	if sh > 0 {
		want["moe.ffn_gate_shexp.weight"], want["moe.ffn_up_shexp.weight"] = []uint64{dim, sh}, []uint64{dim, sh}
		want["moe.ffn_down_shexp.weight"] = []uint64{sh, dim}
	}
	// The selection bias is optional for deepseek2 (DeepSeek V3 has it,
	// V2 not; the first MoE block of the file says for all) and required
	// for glm4moe, as llama.cpp loads them.
	moe := max(first, c.LeadDense)
	if _, ok := f.Tensor(fmt.Sprintf("blk.%d.exp_probs_b.bias", moe)); ok || c.Arch == "glm4moe" {
		c.ExpertProbsBias = true
		want["moe.exp_probs_b.bias"] = []uint64{uint64(c.Experts)}
	}
	if _, ok := f.Tensor(fmt.Sprintf("blk.%d.ffn_gate_up_exps.weight", moe)); ok {
		return fmt.Errorf("%s model with blk.%d.ffn_gate_up_exps.weight is not supported", c.Arch, moe)
	}
	return nil
}

// tallyTypes checks that every tensor has a type Orrery runs and counts the
// parameters, the type mix and the file type.
func tallyTypes(c *Config, f *gguf.File) error {
	counts := map[gguf.TensorType]uint64{}
	shares := map[gguf.TensorType]*TypeShare{}
	for _, t := range f.Tensors {
		if !slices.Contains(SupportedTypes, t.Type) {
			names := make([]string, len(SupportedTypes))
			for i, st := range SupportedTypes {
				names[i] = st.String()
			}
			return fmt.Errorf("tensor %s has type %s, which Orrery does not run; supported: %s", t.Name, t.Type, strings.Join(names, ", "))
		}
		c.Params += t.Elements()
		counts[t.Type] += t.Elements()
		if shares[t.Type] == nil {
			shares[t.Type] = &TypeShare{Type: t.Type.String()}
		}
		shares[t.Type].Tensors++
		shares[t.Type].Bytes += t.Size
	}
	var best uint64
	for t, n := range counts {
		if n > best || n == best && t.String() < c.FileType {
			best, c.FileType = n, t.String()
		}
	}
	for _, sh := range shares {
		c.Types = append(c.Types, *sh)
	}
	slices.SortFunc(c.Types, func(a, b TypeShare) int {
		if a.Bytes != b.Bytes {
			return cmp.Compare(b.Bytes, a.Bytes)
		}
		return strings.Compare(a.Type, b.Type)
	})
	if name := fileTypeNames[f.Uint("general.file_type", 1<<63)]; name != "" {
		c.FileType = name
	}
	return nil
}

// checkBlocks checks that every block (of the shard) is there with the right
// shapes.
func checkBlocks(c Config, f *gguf.File, first, last int, want map[string][]uint64) error {
	for i := first; i < last; i++ {
		for suffix, dims := range want {
			// deepseek2, glm4moe: "dense." and "moe." tensors by block.
			if rest, ok := strings.CutPrefix(suffix, "dense."); ok {
				if c.IsMoE(i) {
					continue
				}
				suffix = rest
			} else if rest, ok := strings.CutPrefix(suffix, "moe."); ok {
				if !c.IsMoE(i) {
					continue
				}
				suffix = rest
			}
			name := fmt.Sprintf("blk.%d.%s", i, suffix)
			t, ok := f.Tensor(name)
			if !ok {
				return fmt.Errorf("no %s tensor", name)
			}
			if !slices.Equal(t.Dims, dims) {
				return fmt.Errorf("%s is %v, want %v", name, t.Dims, dims)
			}
		}
	}
	return nil
}
