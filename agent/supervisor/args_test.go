package supervisor

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// TestArgsDraft: rank 0's draft model reaches its runner's command line,
// with the draft's threads only when the agent sets them.
func TestArgsDraft(t *testing.T) {
	inst := state.Instance{InstanceID: "i1", DraftModel: "kjv-draft", Ranks: []state.ShardRange{{NodeID: "n1", FirstLayer: 0, LastLayer: 8}}}
	for _, c := range []struct {
		threads int
		want    string
	}{
		{0, "--draft-model /m/d.gguf --draft-id kjv-draft"},
		{1, "--draft-model /m/d.gguf --draft-id kjv-draft --draft-threads 1"},
	} {
		p := &proc{s: &Supervisor{cfg: Config{NodeID: "n1", DraftThreads: c.threads}}, inst: inst}
		args := strings.Join(p.args("/m/t.gguf", "/m/d.gguf"), " ")
		if !strings.Contains(args, c.want) || c.threads == 0 && strings.Contains(args, "--draft-threads") {
			t.Errorf("draft threads %d: args %q, want %q", c.threads, args, c.want)
		}
	}
	p := &proc{s: &Supervisor{cfg: Config{NodeID: "n1", DraftThreads: 1}}, inst: inst}
	if args := p.args("/m/t.gguf", ""); slices.Contains(args, "--draft-threads") {
		t.Errorf("no draft, yet %q", args)
	}
}

// TestListenIn: a direct listener takes the first free port of its range,
// and a range with none free is an error naming it.
func TestListenIn(t *testing.T) {
	base := testutil.FreeBasePort(t, 2)
	first, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := listenIn("127.0.0.1", [2]int{base, base}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("no free port in %d-%d", base, base)) {
		t.Fatalf("a busy range: %v", err)
	}
	ln, err := listenIn("127.0.0.1", [2]int{base, base + 1})
	if err != nil {
		t.Fatalf("range %d-%d with %d free: %v", base, base+1, base+1, err)
	}
	defer ln.Close()
	if got := ln.Addr().(*net.TCPAddr).Port; got != base+1 {
		t.Fatalf("range %d-%d (%d busy): listened on %d", base, base+1, base, got)
	}
}

// TestArgsSpeculative: an instance's default speculation reaches rank 0's
// runner as JSON, and no other rank's.
func TestArgsSpeculative(t *testing.T) {
	inst := state.Instance{InstanceID: "i1", Speculative: &runnerapi.Speculation{Draft: "ngram", Max: 6},
		Ranks: []state.ShardRange{{NodeID: "n1", FirstLayer: 0, LastLayer: 4}, {Rank: 1, NodeID: "n1", FirstLayer: 4, LastLayer: 8}}}
	for rank, want := range []bool{true, false} {
		p := &proc{s: &Supervisor{cfg: Config{NodeID: "n1", AgentAPI: "127.0.0.1:1"}}, inst: inst, rank: rank}
		args := strings.Join(p.args("/m/t.gguf", ""), " ")
		if got := strings.Contains(args, `--speculative {"draft":"ngram","max":6}`); got != want {
			t.Errorf("rank %d: args %q; --speculative there: %v, want %v", rank, args, got, want)
		}
	}
}

// TestArgsGPU: a runner's --gpu-layers is the instance's, else the
// node's; a node with --gpu off passes 0 whatever the instance says, and
// --gpu-software and --gpu-memory only where blocks may go on a GPU.
func TestArgsGPU(t *testing.T) {
	three, zero := runnerapi.GPULayers(3), runnerapi.GPULayers(0)
	for _, c := range []struct {
		name     string
		cfg      Config
		inst     *runnerapi.GPULayers
		want     string
		software bool
		memory   string // --gpu-memory's value, "": none
	}{
		{"node default", Config{GPULayers: runnerapi.GPUAuto}, nil, "auto", false, ""},
		{"zero config", Config{}, nil, "0", false, ""},
		{"instance wins", Config{GPULayers: runnerapi.GPUAuto}, &three, "3", false, ""},
		{"instance none", Config{GPULayers: runnerapi.GPUAuto, GPUSoftware: true}, &zero, "0", false, ""},
		{"software", Config{GPULayers: runnerapi.GPUAuto, GPUSoftware: true}, nil, "auto", true, ""},
		{"gpu off", Config{GPULayers: runnerapi.GPUAuto, NoGPU: true, GPUSoftware: true, GPUMemory: 6 << 30}, &three, "0", false, ""},
		{"capped", Config{GPULayers: runnerapi.GPUAuto, GPUMemory: 6 << 30}, nil, "auto", false, "6144MiB"},
		{"capped, none", Config{GPUMemory: 6 << 30}, nil, "0", false, ""},
	} {
		c.cfg.NodeID = "n1"
		inst := state.Instance{InstanceID: "i1", GPULayers: c.inst, Ranks: []state.ShardRange{{NodeID: "n1", FirstLayer: 0, LastLayer: 8}}}
		p := &proc{s: &Supervisor{cfg: c.cfg}, inst: inst}
		args := p.args("/m/t.gguf", "")
		i := slices.Index(args, "--gpu-layers")
		if i < 0 || i+1 == len(args) || args[i+1] != c.want {
			t.Errorf("%s: args %q, want --gpu-layers %s", c.name, args, c.want)
		}
		if got := slices.Contains(args, "--gpu-software"); got != c.software {
			t.Errorf("%s: args %q: --gpu-software %v, want %v", c.name, args, got, c.software)
		}
		mem := ""
		if i := slices.Index(args, "--gpu-memory"); i >= 0 && i+1 < len(args) {
			mem = args[i+1]
		}
		if mem != c.memory {
			t.Errorf("%s: args %q: --gpu-memory %q, want %q", c.name, args, mem, c.memory)
		}
	}
}

// TestStatusEqualOffload: a rank's Offload counts as a change of its
// status (so it is published) by value, not by pointer.
func TestStatusEqualOffload(t *testing.T) {
	dev := func() *runnerapi.Device { return &runnerapi.Device{Name: "Vulkan0", Library: "Vulkan"} }
	a := state.Runner{RunnerID: "r", Offload: &runnerapi.Offload{Device: dev(), Blocks: 4, Total: 8}}
	b := a
	b.Offload = &runnerapi.Offload{Device: dev(), Blocks: 4, Total: 8}
	if !statusEqual(a, b) {
		t.Errorf("equal Offloads in separate pointers differ")
	}
	b.Offload = &runnerapi.Offload{Device: dev(), Blocks: 3, Total: 8}
	if statusEqual(a, b) {
		t.Errorf("3 and 4 blocks are equal")
	}
	b.Offload = &runnerapi.Offload{Device: &runnerapi.Device{Name: "Vulkan1", Library: "Vulkan"}, Blocks: 4, Total: 8}
	if statusEqual(a, b) {
		t.Errorf("two devices are equal")
	}
	b.Offload = nil
	if statusEqual(a, b) || !statusEqual(b, b) {
		t.Errorf("nil against an Offload")
	}
}
