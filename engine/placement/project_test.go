package placement

import (
	"fmt"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// q4KM types a generated header as llama.cpp's Q4_K_M does: Q4_K, with
// Q6_K for the output and, in the blocks llama.cpp gives more bits (the
// first and last eighth, and every third between), attn_v and ffn_down.
func q4KM(layers int) func(string, gguf.TensorType) gguf.TensorType {
	return func(name string, t gguf.TensorType) gguf.TensorType {
		if t == gguf.F32 {
			return t // norms, routers
		}
		if name == "output.weight" {
			return gguf.Q6_K
		}
		var il int
		if _, err := fmt.Sscanf(name, "blk.%d.", &il); err == nil {
			more := il < layers/8 || il >= 7*layers/8 || (il-layers/8)%3 == 2
			if more && (strings.Contains(name, "attn_v.") || strings.Contains(name, "ffn_down")) {
				return gguf.Q6_K
			}
		}
		return gguf.Q4_K
	}
}

// macSpeed is an M3 Ultra as the cost model sees it: weights streamed at
// 535 GB/s (65 % of Apple's 819 GB/s: a published MLX decode of Llama 3.1
// 8B in 4 bits at 119 tok/s on an M3 Ultra), its per-block costs inside
// that figure; software per all-reduce and hop as given.
func macSpeed(reduce, hop float64) runnerapi.Speed {
	ts := func(bits float64) runnerapi.TypeSpeed {
		return runnerapi.TypeSpeed{DecodeBytesPerSec: 535e9, PrefillFlopsPerSec: 10e12, BitsPerWeight: bits}
	}
	return runnerapi.Speed{Threads: 1, MemBytesPerSec: 535e9, StreamRatio: 1, ReduceMicros: reduce, HopMicros: hop,
		Types: map[string]runnerapi.TypeSpeed{"Q4_K": ts(4.5), "Q6_K": ts(6.5625), "F32": ts(32), "F16": ts(16)}}
}

// TestMacProjection predicts 2 and 4 M3 Ultra (512 GB each) on Llama 3.3
// 70B and Qwen3-235B-A22B in Q4_K_M, over Thunderbolt 5 with TCP (50 µs
// one way, the all-reduce and hop software measured on this machine),
// through the agents or linked directly (no relay hops), and over RDMA
// (5 µs, 5 µs of software, direct). It logs the table docs/cost-model.md shows, and
// checks the shape of it: tensor (and expert) parallelism speeds the
// models up over RDMA, the dense one over TCP too, and a pipeline never
// does.
func TestMacProjection(t *testing.T) {
	type model_ struct {
		name string
		o    model.GenOptions
	}
	models := []model_{
		{"Llama 3.3 70B", model.GenOptions{Arch: "llama", Layers: 80, Dim: 8192, FFDim: 28672, Heads: 64, KVHeads: 8, Vocab: 128256, ContextLen: 8192}},
		{"Qwen3-235B-A22B", model.GenOptions{Arch: "qwen3moe", Layers: 94, Dim: 4096, Heads: 64, KVHeads: 4, HeadDim: 128, Vocab: 151936,
			ContextLen: 8192, Experts: 128, ExpertsUsed: 8, ExpertFFDim: 1536}},
	}
	links := []struct {
		name        string
		oneWay      float64
		reduce, hop float64
		bytesPerSec float64
		direct      bool
	}{{"Thunderbolt 5, TCP via the agents", 50, 35, 15, 10e9, false}, {"Thunderbolt 5, TCP direct", 50, 35, 15, 10e9, true},
		{"RDMA", 5, 5, 0, 10e9, true}}
	for _, m := range models {
		f, err := model.GenHeader(m.o, q4KM(m.o.Layers))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := model.FromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		c, l := CostOf(f, cfg), LayoutOf(f, cfg, 8192, 1)
		t.Logf("%s: %.1f GB, %.1f GB read per token", m.name, float64(f.DataSize())/1e9, decodeBytes(c)/1e9)
		for _, lk := range links {
			var nodes []Node
			speeds := map[string]runnerapi.Speed{}
			for i := range 4 {
				id := fmt.Sprintf("mac%d", i)
				nodes = append(nodes, Node{ID: id, Available: 480 << 30})
				speeds[id] = macSpeed(lk.reduce, lk.hop)
			}
			in := Inputs{Speed: speeds, Position: 512, Prompt: 512, Direct: lk.direct,
				Link: func(a, b string) (Link, bool) {
					return Link{OneWayMicros: lk.oneWay, BytesPerSec: lk.bytesPerSec}, true
				}}
			got := map[string]runnerapi.Prediction{}
			for _, p := range Candidates(l, c, nodes, false, in) {
				got[p.Plan] = p
				if p.Error != "" {
					t.Logf("  %-34s %-10s –  (%s)", lk.name, p.Plan, firstLine(p.Error))
					continue
				}
				t.Logf("  %-34s %-10s %5.1f tok/s (%.2f× one node; %.1f ms per token, %.1f of them messages)", lk.name, p.Plan,
					p.DecodeTokPerSec, p.DecodeTokPerSec/got["one node"].DecodeTokPerSec, p.DecodeMs, p.CommMs)
			}
			one := got["one node"]
			if !one.Fits || got["pipeline 2"].DecodeTokPerSec >= one.DecodeTokPerSec {
				t.Errorf("%s, %s: one node %+v, pipeline 2 %+v: a pipeline must not decode faster", m.name, lk.name, one, got["pipeline 2"])
			}
			// Over RDMA more Macs are faster for both; over TCP through
			// the agents the mixture's 188 all-reduces per token eat most
			// of what its small per-token reads save.
			if tp2, tp4 := got["tensor 2"], got["tensor 4"]; (cfg.Experts == 0 || lk.reduce < 10) &&
				!(tp2.DecodeTokPerSec > one.DecodeTokPerSec && tp4.DecodeTokPerSec > tp2.DecodeTokPerSec) {
				t.Errorf("%s, %s: tensor 2 %.1f and 4 %.1f tok/s against one node's %.1f", m.name, lk.name, tp2.DecodeTokPerSec, tp4.DecodeTokPerSec, one.DecodeTokPerSec)
			}
		}
	}
}

// decodeBytes is every byte a one-node decode step reads: each block's
// matrices and the head.
func decodeBytes(c ModelCost) float64 {
	b := c.Head.Bytes()
	for il := range c.Layers {
		b += c.Attn[il].Bytes() + c.KV[il].Bytes() + c.MLP[il].Bytes() + c.Shared[il].Bytes() + c.Exps[il].Bytes() + c.Rest[il].Bytes()
	}
	return b
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, ':'); i > 0 && len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
