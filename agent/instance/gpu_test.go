package instance

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// nodeSpeed is a node whose kernels read rate bytes/s of any type.
func nodeSpeed(rate float64) runnerapi.Speed {
	ts := func(bits float64) runnerapi.TypeSpeed {
		return runnerapi.TypeSpeed{DecodeBytesPerSec: rate, PrefillFlopsPerSec: 1e11, BitsPerWeight: bits}
	}
	return runnerapi.Speed{Threads: 1, MemBytesPerSec: 1e12, StreamRatio: 1, LayerMicros: 20, TokenMicros: 100, ReduceMicros: 30, HopMicros: 10,
		Types: map[string]runnerapi.TypeSpeed{"F32": ts(32), "F16": ts(16), "Q8_0": ts(8.5)}}
}

// A node's published GPU reaches placement: the previews show each rank's
// blocks on its GPU and on its CPU, the pipeline split as auto would
// place it (the blocks where compute is fastest: n2's GPU, n1 keeping
// one), and auto places that split, its prediction counting the GPU.
func TestPreviewsAndAutoFollowGPU(t *testing.T) {
	m, seq := oneNode(t)
	ctx := context.Background()
	mem := m.cfg.Store.State().NodeMemory["n1"]
	gpu := runnerapi.Device{ID: "GPU-0", Library: "CUDA", Name: "CUDA0", Description: "NVIDIA RTX 4090", TotalBytes: 24 << 30, FreeBytes: 20 << 30}
	slow, fast := nodeSpeed(1e8), nodeSpeed(1e9)
	g := runnerapi.GPUSpeed{Device: gpu, MemBytesPerSec: 1e12, StreamRatio: 1, LayerMicros: 5, TokenMicros: 40, CrossMicros: 20,
		Types: map[string]runnerapi.TypeSpeed{"F32": {DecodeBytesPerSec: 1e11, PrefillFlopsPerSec: 1e12, BitsPerWeight: 32}}}
	fast.GPUs = []runnerapi.GPUSpeed{g}
	link := func(peer string) state.NodeLinks {
		return state.NodeLinks{Links: []state.LinkTelemetry{{Peer: peer, RTTMinMs: 2, Probes: 5}}, SampledAt: time.Now()}
	}
	for _, ev := range []state.Event{
		state.NodeIdentityMeasured{NodeID: "n1", Identity: state.NodeIdentity{NodeID: "n1", Speed: &slow}},
		state.NodeIdentityMeasured{NodeID: "n2", Identity: state.NodeIdentity{NodeID: "n2", Speed: &fast, GPUs: fast.Devices()}},
		state.NodeMemoryMeasured{NodeID: "n2", Memory: mem},
		state.NodeLinksMeasured{NodeID: "n1", Links: link("n2")}, state.NodeLinksMeasured{NodeID: "n2", Links: link("n1")},
	} {
		if err := seq.Publish(ev); err != nil {
			t.Fatal(err)
		}
	}
	p, err := m.Previews("tiny", nil)
	if err != nil {
		t.Fatal(err)
	}
	var two []rankView
	for _, pv := range p.Previews {
		if pv.Nodes == 2 {
			for _, r := range pv.Ranks {
				two = append(two, rankView{r.NodeID, r.FirstLayer, r.LastLayer, r.GPUBlocks, r.CPUBlocks, r.GPUHead, r.GPU != nil})
			}
		}
	}
	want := []rankView{{"n1", 0, 1, 0, 0, false, false}, {"n2", 1, 4, 3, 0, true, true}}
	if len(two) != 2 || two[0] != want[0] || two[1] != want[1] {
		t.Fatalf("previews over two nodes: ranks %+v, want %+v", two, want)
	}
	// Asked for no GPU blocks, the previews put none on n2's GPU.
	none := runnerapi.GPULayers(0)
	cpu, err := m.Previews("tiny", &none)
	if err != nil {
		t.Fatal(err)
	}
	for _, pv := range cpu.Previews {
		for _, r := range pv.Ranks {
			if r.GPUBlocks > 0 || r.GPUHead || r.GPU != nil {
				t.Errorf(`"gpuLayers": 0 previews rank %+v on a GPU`, r)
			}
		}
	}
	in, _, err := m.Place(ctx, api.PlaceRequest{Model: "tiny", Nodes: []string{"n1", "n2"}, Parallelism: &api.Parallelism{Auto: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Ranks) != 2 || in.Ranks[0].NodeID != "n1" || in.Ranks[0].LastLayer != 1 || in.Ranks[1].FirstLayer != 1 || in.Prediction == nil ||
		in.Prediction.Plan != "pipeline 2" {
		t.Fatalf("auto placed %+v (prediction %+v), want pipeline 2 with n1 holding one block", in.Ranks, in.Prediction)
	}
	var planned runnerapi.Prediction
	for _, pl := range p.Plans {
		if pl.Plan == "pipeline 2" {
			planned = pl
		}
	}
	if in.Prediction.DecodeMs != planned.DecodeMs {
		t.Errorf("placed predicting %.4f ms, previewed %.4f", in.Prediction.DecodeMs, planned.DecodeMs)
	}
}

type rankView struct {
	node              string
	first, last       int
	gpu, cpu          int
	head, onGPUDevice bool
}
