package speed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

func sample() runnerapi.Speed {
	return runnerapi.Speed{Threads: 2, MemBytesPerSec: 1e10, StreamRatio: 0.8,
		Types: map[string]runnerapi.TypeSpeed{"Q8_0": {DecodeBytesPerSec: 2e10, PrefillFlopsPerSec: 1e11, BitsPerWeight: 8.5}}}
}

// The cache gives back what was stored only when it was measured the
// same way; a broken file or another build, thread count or machine
// gives nothing.
func TestCache(t *testing.T) {
	c := Cache{Path: filepath.Join(t.TempDir(), "speed.json"), Version: "v1", Threads: 2, Machine: "m"}
	if _, ok := c.Load(); ok {
		t.Fatal("a missing file loaded")
	}
	if err := c.Store(sample()); err != nil {
		t.Fatal(err)
	}
	if sp, ok := c.Load(); !ok || sp.Types["Q8_0"].DecodeBytesPerSec != 2e10 {
		t.Fatalf("stored speed loads as %+v, %v", sp, ok)
	}
	for _, other := range []Cache{{Path: c.Path, Version: "v2", Threads: 2, Machine: "m"}, {Path: c.Path, Version: "v1", Threads: 4, Machine: "m"},
		{Path: c.Path, Version: "v1", Threads: 2, Machine: "n"}, {Path: c.Path, Version: "v1", Threads: 2, Machine: "m", GPUSoftware: true},
		{Path: c.Path, Version: "v1", Threads: 2, Machine: "m", NoGPU: true}} {
		if _, ok := other.Load(); ok {
			t.Errorf("%+v loaded the speed measured as %+v", other, c)
		}
	}
	os.WriteFile(c.Path, []byte("{"), 0o600)
	if _, ok := c.Load(); ok {
		t.Error("a broken file loaded")
	}
}

// A file of orrery speed --json reads back; one without figures is
// refused, saying why.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"threads":1,"memBytesPerSec":1e10,"streamRatio":1,"types":{"F32":{"decodeBytesPerSec":1e10,"prefillFlopsPerSec":1e11}}}`), 0o600)
	if sp, err := ReadFile(good); err != nil || sp.MemBytesPerSec != 1e10 {
		t.Fatalf("%+v, %v", sp, err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"threads":1}`), 0o600)
	if _, err := ReadFile(bad); err == nil || !strings.Contains(err.Error(), "memory bandwidth") {
		t.Fatalf("a file without figures: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "none.json")); err == nil {
		t.Fatal("a missing file read")
	}
}

// A speed with its GPUs keeps them through the cache, which is keyed by
// whether a software device was measured too; a file written before GPUs
// were measured (no gpuSoftware key) still loads without one.
func TestCacheGPUs(t *testing.T) {
	c := Cache{Path: filepath.Join(t.TempDir(), "speed.json"), Version: "v1", Threads: 2, Machine: "m", GPUSoftware: true}
	sp := sample()
	sp.GPUs = []runnerapi.GPUSpeed{{Device: runnerapi.Device{ID: "u", Library: "Vulkan", Name: "Vulkan0", TotalBytes: 2 << 30, FreeBytes: 1 << 30, Software: true},
		MemBytesPerSec: 5e8, StreamRatio: 1.2, LayerMicros: 9000, TokenMicros: 2500, CrossMicros: 8000,
		Types: map[string]runnerapi.TypeSpeed{"Q8_0": {DecodeBytesPerSec: 2e8, PrefillFlopsPerSec: 6e8, BitsPerWeight: 8.5}}}}
	if err := c.Store(sp); err != nil {
		t.Fatal(err)
	}
	got, ok := c.Load()
	if g, found := got.GPU("u", "Vulkan"); !ok || !found || g.CrossMicros != 8000 || g.Device.FreeBytes != 1<<30 {
		t.Fatalf("stored GPU loads as %+v (%v, %v)", got.GPUs, ok, found)
	}
	old := filepath.Join(t.TempDir(), "speed.json")
	os.WriteFile(old, []byte(`{"version":"v1","threads":2,"machine":"m","speed":{"threads":2,"memBytesPerSec":1e10,"streamRatio":1,"types":{"F32":{"decodeBytesPerSec":1e10,"prefillFlopsPerSec":1e11}}}}`), 0o600)
	if sp, ok := (Cache{Path: old, Version: "v1", Threads: 2, Machine: "m"}).Load(); !ok || len(sp.GPUs) != 0 {
		t.Errorf("a file from before GPUs: %+v, %v", sp, ok)
	}
}
