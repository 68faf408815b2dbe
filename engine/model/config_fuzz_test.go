package model

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// FuzzFromGGUF feeds FromGGUF every family's real metadata with fuzzed
// values in the keys a family reads: it must not panic, and whatever it
// accepts must be a shape a forward pass can run.
func FuzzFromGGUF(f *testing.F) {
	files := familyFiles(f)
	f.Add(uint8(4), uint32(8), uint32(2), uint32(64), uint32(32), "linear", float32(1), uint32(32))
	f.Add(uint8(3), uint32(0), uint32(0), uint32(0), uint32(7), "yarn", float32(4), uint32(16))
	f.Add(uint8(0), uint32(1), uint32(1), uint32(1), uint32(0), "none", float32(-1), uint32(0))
	// glm4moe's partial rotary: a quarter, an odd count, more than a head.
	glm := uint8(slices.Index(Families, "glm4moe"))
	f.Add(glm, uint32(8), uint32(2), uint32(64), uint32(16), "linear", float32(1), uint32(4))
	f.Add(glm, uint32(8), uint32(2), uint32(64), uint32(16), "linear", float32(1), uint32(7))
	f.Add(glm, uint32(8), uint32(2), uint32(64), uint32(16), "yarn", float32(4), uint32(18))
	f.Fuzz(func(t *testing.T, famIdx uint8, experts, used, eff, keyLen uint32, scaling string, factor float32, rotDims uint32) {
		fam := Families[int(famIdx)%len(Families)]
		src := files[fam]
		arch := src.String("general.architecture", "")
		g := &gguf.File{KV: append([]gguf.KV(nil), src.KV...), Tensors: src.Tensors}
		for _, kv := range []gguf.KV{
			{Key: arch + ".expert_count", Value: experts}, {Key: arch + ".expert_used_count", Value: used},
			{Key: arch + ".expert_feed_forward_length", Value: eff}, {Key: arch + ".attention.key_length", Value: keyLen},
			{Key: arch + ".rope.scaling.type", Value: scaling}, {Key: arch + ".rope.scaling.factor", Value: factor},
			{Key: arch + ".rope.dimension_count", Value: rotDims},
		} {
			g = g.With(kv.Key, kv.Value)
		}
		c, err := FromGGUF(g)
		if err != nil {
			return
		}
		if c.Layers < 1 || c.HeadDim < 2 || c.HeadDim%2 != 0 || c.Heads%c.KVHeads != 0 || !(c.RopeScale > 0) ||
			c.Experts < 0 || c.ExpertsUsed > c.Experts || (c.Experts > 0) != (c.ExpertFFDim > 0) || c.Vocab < 1 ||
			!c.MLA && (c.RotaryDims() < 2 || c.RotaryDims()%2 != 0 || c.RotaryDims() > c.HeadDim) {
			t.Fatalf("%s accepted an impossible shape: %+v", fam, c)
		}
	})
}

// FuzzGLM4MoE feeds glm4moe's reader fuzzed values of the keys only it
// (and deepseek2) reads: whatever it accepts has a trunk, a rotary part
// within the head, leading dense blocks within the trunk and a gating it
// computes.
func FuzzGLM4MoE(f *testing.F) {
	src := familyFiles(f)["glm4moe"]
	f.Add(uint32(1), uint32(8), uint32(1), uint32(1), uint32(2), uint32(0))
	f.Add(uint32(2), uint32(8), uint32(1), uint32(1), uint32(2), uint32(0)) // no trunk left
	f.Add(uint32(0), uint32(16), uint32(3), uint32(0), uint32(0), uint32(2))
	f.Add(uint32(1), uint32(3), uint32(9), uint32(65), uint32(7), uint32(3))
	f.Fuzz(func(t *testing.T, nextn, rot, lead, shared, gating, groups uint32) {
		g := src
		for _, kv := range []gguf.KV{
			{Key: "glm4moe.nextn_predict_layers", Value: nextn}, {Key: "glm4moe.rope.dimension_count", Value: rot},
			{Key: "glm4moe.leading_dense_block_count", Value: lead}, {Key: "glm4moe.expert_shared_count", Value: shared},
			{Key: "glm4moe.expert_gating_func", Value: gating}, {Key: "glm4moe.expert_group_count", Value: groups},
		} {
			g = g.With(kv.Key, kv.Value)
		}
		c, err := FromGGUF(g)
		if err != nil {
			return
		}
		if c.Layers < 1 || c.FileBlocks() != 3 || c.RotaryDims() < 2 || c.RotaryDims()%2 != 0 || c.RotaryDims() > c.HeadDim ||
			c.LeadDense > c.Layers || c.SharedExperts > 64 || gating > 2 || c.ExpertSigmoid != (gating != 1) {
			t.Fatalf("accepted an impossible glm4moe: %+v", c)
		}
	})
}

// familyFiles is every family's generated tiny model (2 blocks), read back.
func familyFiles(f *testing.F) map[string]*gguf.File {
	files := map[string]*gguf.File{}
	dir := f.TempDir()
	for _, fam := range Families {
		o, err := ApplyFamily(Presets["tiny"], fam)
		if err != nil {
			f.Fatal(err)
		}
		o.Layers = 2
		path := filepath.Join(dir, fam+".gguf")
		if err := Generate(path, o); err != nil {
			f.Fatal(err)
		}
		if files[fam], err = gguf.ReadFile(path); err != nil {
			f.Fatal(err)
		}
	}
	return files
}
