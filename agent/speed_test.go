package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// A node publishes the GPUs its speed lists in its identity, beside the
// speed: the measured one and the one whose measurement failed alike, as
// the API's /state/nodeIdentities/{id} shows them; with --gpu-memory, no
// more free memory than that.
func TestIdentityPublishesGPUs(t *testing.T) {
	t.Run("all", func(t *testing.T) { identityPublishesGPUs(t, 0) })
	t.Run("capped", func(t *testing.T) { identityPublishesGPUs(t, 6<<30) })
}

func identityPublishesGPUs(t *testing.T, capBytes uint64) {
	q8 := runnerapi.TypeSpeed{DecodeBytesPerSec: 2e10, PrefillFlopsPerSec: 1e11, BitsPerWeight: 8.5}
	devs := []runnerapi.Device{
		{ID: "GPU-1", Library: "CUDA", Name: "CUDA0", Description: "NVIDIA GeForce RTX 4090", TotalBytes: 24 << 30, FreeBytes: 23 << 30},
		{ID: "6d657361", Library: "Vulkan", Name: "Vulkan0", Description: "llvmpipe (LLVM 15.0.6, 256 bits)", TotalBytes: 2 << 30, FreeBytes: 2 << 30, Software: true},
	}
	sp := runnerapi.Speed{Threads: 2, MemBytesPerSec: 1e10, StreamRatio: 1, Types: map[string]runnerapi.TypeSpeed{"Q8_0": q8},
		GPUs: []runnerapi.GPUSpeed{{Device: devs[0], MemBytesPerSec: 9e11, StreamRatio: 1, Types: map[string]runnerapi.TypeSpeed{"Q8_0": q8}},
			{Device: devs[1], Error: "signal: killed"}}}
	b, err := json.Marshal(sp)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.GPUMemory = capBytes
	cfg.Speed = filepath.Join(t.TempDir(), "speed.json")
	if err := os.WriteFile(cfg.Speed, b, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop")
		}
	}()
	testutil.WaitFor(t, "the identity with its speed", func() bool { return a.Store().State().NodeIdentities[a.NodeID()].Speed != nil })
	if capBytes > 0 { // the 24 GiB card's 23 free down to the cap; lavapipe's 2 stay
		devs[0].FreeBytes = capBytes
	}
	id := a.Store().State().NodeIdentities[a.NodeID()]
	if !reflect.DeepEqual(id.GPUs, devs) {
		t.Errorf("identity's GPUs %+v, want %+v", id.GPUs, devs)
	}
	resp, err := http.Get("http://" + a.Addr().String() + "/state/nodeIdentities/" + a.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		GPUs []runnerapi.Device `json:"gpus"`
	}
	if err := json.Unmarshal(body, &got); err != nil || !reflect.DeepEqual(got.GPUs, devs) {
		t.Errorf("/state/nodeIdentities/%s: %s (%v)", a.NodeID(), body, err)
	}
}
