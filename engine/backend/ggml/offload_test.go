package ggml

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/ml"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A rank of blocks 4..11 of a 12-block model with the head: each block
// needs 100 MiB on the device, the head 300, the compute buffers 200.
func chooseCase() (runnerapi.Device, blockNeed, backend.Options) {
	dev := runnerapi.Device{ID: "0", Library: "Vulkan", Name: "Vulkan0", FreeBytes: 2 << 30}
	need := blockNeed{block: map[int]uint64{}, head: 300 << 20, graph: 200 << 20}
	for il := 4; il < 12; il++ {
		need.block[il] = 100 << 20
	}
	return dev, need, backend.Options{FirstLayer: 4, LastLayer: 12, GPULayers: runnerapi.GPUAuto}
}

// What a rank puts on the device: all when it fits, the last blocks that
// fit when not (with the reason), the head only once every block fits;
// --gpu-memory caps the device's free memory; a number of blocks beyond
// what fits is refused, naming the device and the memory.
func TestChoose(t *testing.T) {
	mib := func(n uint64) uint64 { return n << 20 }
	for _, c := range []struct {
		name    string
		free    uint64
		cap     uint64
		layers  runnerapi.GPULayers
		noHead  bool
		blocks  []int
		head    bool
		reason  string // a part of it; "" wants none
		refused string // a part of the error; "" wants none
	}{
		{name: "all fit", free: mib(2048), blocks: []int{4, 5, 6, 7, 8, 9, 10, 11}, head: true},
		{name: "all but the head", free: mib(1200), blocks: []int{4, 5, 6, 7, 8, 9, 10, 11}, reason: "8 of 9 fit Vulkan0's 1.17 GiB free"},
		{name: "the last three", free: mib(550), blocks: []int{9, 10, 11}, reason: "3 of 9 fit Vulkan0's 0.54 GiB free"},
		{name: "none past the buffers", free: mib(200), blocks: []int{}, reason: "0 of 9 fit"},
		{name: "capped", free: mib(2048), cap: mib(550), blocks: []int{9, 10, 11}, reason: "3 of 9 fit Vulkan0's 0.54 GiB allowed by --gpu-memory"},
		{name: "a cap above free", free: mib(550), cap: mib(4096), blocks: []int{9, 10, 11}, reason: "0.54 GiB free"},
		{name: "no head on this rank", free: mib(2048), noHead: true, blocks: []int{4, 5, 6, 7, 8, 9, 10, 11}},
		{name: "asked for two", free: mib(2048), layers: 2, blocks: []int{10, 11}, reason: "--gpu-layers 2"},
		{name: "asked for all", free: mib(2048), layers: 999, blocks: []int{4, 5, 6, 7, 8, 9, 10, 11}, head: true},
		{name: "asked for more than fit", free: mib(550), layers: 4, refused: "4 blocks asked for Vulkan0, which has 0.54 GiB free: 3 fit"},
		{name: "asked for more than allowed", free: mib(2048), cap: mib(550), layers: 999, refused: "9 blocks asked for Vulkan0, which has 0.54 GiB allowed by --gpu-memory: 3 fit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev, need, opts := chooseCase()
			dev.FreeBytes, opts.GPUMemory = c.free, c.cap
			if c.layers != 0 {
				opts.GPULayers = c.layers
			}
			if c.noHead {
				need.head = 0
			}
			p, err := choose(dev, need, opts, !c.noHead)
			if c.refused != "" {
				if !errors.Is(err, ErrGPUFit) || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("err %v, want ErrGPUFit saying %q", err, c.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.blocks, c.blocks) && !(len(p.blocks) == 0 && len(c.blocks) == 0) || p.head != c.head {
				t.Errorf("blocks %v head %v, want %v head %v", p.blocks, p.head, c.blocks, c.head)
			}
			if c.reason == "" && p.reason != "" || !strings.Contains(p.reason, c.reason) {
				t.Errorf("reason %q, want %q", p.reason, c.reason)
			}
			if p.dev.FreeBytes != c.free {
				t.Errorf("the device's free memory became %d, want %d as it has (a cap is the rank's, not the device's)", p.dev.FreeBytes, c.free)
			}
		})
	}
}

// A load short of device memory is tried again with fewer blocks (the
// head first, then a quarter at a time) until one loads or none are
// left; the rank's reason says what happened. Other errors end it at once.
func TestLoadFitting(t *testing.T) {
	dev, _, _ := chooseCase()
	all := gpuPlan{dev: dev, blocks: []int{4, 5, 6, 7, 8, 9, 10, 11}, head: true}
	noMem := ml.ErrNoMem{}
	t.Run("fits after three tries", func(t *testing.T) {
		var tried []string
		r, err := loadFitting(all, func(p gpuPlan) (*Rank, error) {
			tried = append(tried, fmt.Sprint(p.blocks, p.head))
			if len(p.blocks) > 5 {
				return nil, fmt.Errorf("load: %w", noMem)
			}
			return &Rank{gpu: p}, nil
		})
		want := []string{"[4 5 6 7 8 9 10 11] true", "[4 5 6 7 8 9 10 11] false", "[6 7 8 9 10 11] false", "[7 8 9 10 11] false"}
		if err != nil || !slices.Equal(tried, want) {
			t.Fatalf("tried %q (%v), want %q", tried, err, want)
		}
		if got := r.gpu.reason; got != "out of memory on Vulkan0 with 6 blocks (head false); loaded with 5" {
			t.Errorf("reason %q", got)
		}
	})
	t.Run("never fits", func(t *testing.T) {
		n := 0
		_, err := loadFitting(all, func(p gpuPlan) (*Rank, error) {
			n++
			return nil, noMem
		})
		// 8+head, 8, 6, 5, 4, 3, 2, 1, 0: the empty plan's error stands.
		if !errors.As(err, &noMem) || n != 9 {
			t.Errorf("%d tries, err %v; want 9 and the out-of-memory error", n, err)
		}
	})
	t.Run("another error", func(t *testing.T) {
		n := 0
		bad := errors.New("bad tensor")
		_, err := loadFitting(all, func(p gpuPlan) (*Rank, error) {
			n++
			return nil, bad
		})
		if !errors.Is(err, bad) || n != 1 {
			t.Errorf("%d tries, err %v; want 1 and the error", n, err)
		}
	})
}

// The head goes to ollama's layer after every block the file states:
// after glm4moe's multi-token-prediction blocks, not onto the first of
// them (which would leave the head on the CPU).
func TestPlanListHeadAfterMTPBlocks(t *testing.T) {
	p := gpuPlan{dev: runnerapi.Device{ID: "0", Library: "Vulkan"}, blocks: []int{2, 3}, head: true}
	for _, c := range []struct {
		cfg  model.Config
		want []int
	}{
		{model.Config{Arch: "llama", Layers: 4}, []int{2, 3, 4}},
		{model.Config{Arch: "glm4moe", Layers: 4, NextN: 1}, []int{2, 3, 5}},
	} {
		l := p.list(c.cfg)
		if len(l) != 1 || !slices.Equal(l[0].Layers, c.want) {
			t.Errorf("%s with %d MTP blocks: GPU layers %v, want %v", c.cfg.Arch, c.cfg.NextN, l, c.want)
		}
	}
}
