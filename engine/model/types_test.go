package model

import (
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
)

// A tensor of a type outside SupportedTypes makes the model refused,
// naming the tensor and the type; the others give a type mix.
func TestTensorTypes(t *testing.T) {
	o := Presets["tiny"]
	o.Type = "BF16"
	_, f := genTiny(t, o)
	c, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.FileType != "BF16" || len(c.Types) != 2 || c.Types[0].Type != "BF16" || c.Types[1].Type != "F32" {
		t.Errorf("BF16 model: quantization %q, types %+v", c.FileType, c.Types)
	}
	var tensors int
	var bytes uint64
	for _, s := range c.Types {
		tensors += s.Tensors
		bytes += s.Bytes
	}
	var want uint64
	for _, ti := range f.Tensors {
		want += ti.Size
	}
	if tensors != len(f.Tensors) || bytes != want {
		t.Errorf("type mix counts %d tensors / %d bytes, the file %d / %d", tensors, bytes, len(f.Tensors), want)
	}
	if mix := TypeMix(c.Types); !strings.HasPrefix(mix, "BF16 ") || !strings.Contains(mix, "F32 ") {
		t.Errorf("TypeMix = %q", mix)
	}

	// general.file_type names the mix llama-quantize was asked for.
	for i := range f.KV {
		if f.KV[i].Key == "general.file_type" {
			f.KV[i].Value = uint32(15)
		}
	}
	if c, err := FromGGUF(f); err != nil || c.FileType != "Q4_K_M" {
		t.Errorf("file_type 15: %q, %v", c.FileType, err)
	}

	for i := range f.Tensors {
		if f.Tensors[i].Name == "blk.1.attn_q.weight" {
			f.Tensors[i].Type = gguf.IQ2_XXS
		}
	}
	_, err = FromGGUF(f)
	if err == nil || !strings.Contains(err.Error(), "blk.1.attn_q.weight") || !strings.Contains(err.Error(), "IQ2_XXS") ||
		!strings.Contains(err.Error(), "supported: F32, F16, BF16, Q4_0") {
		t.Errorf("IQ2_XXS tensor: err = %v", err)
	}
}
