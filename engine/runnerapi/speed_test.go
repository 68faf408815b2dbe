package runnerapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func testSpeed() Speed {
	q8 := TypeSpeed{DecodeBytesPerSec: 2e10, PrefillFlopsPerSec: 1e11, BitsPerWeight: 8.5}
	return Speed{Threads: 2, MemBytesPerSec: 1e10, StreamRatio: 0.8, Types: map[string]TypeSpeed{"Q8_0": q8},
		LayerMicros: 20, TokenMicros: 100, ReduceMicros: 30, HopMicros: 10, Version: "v1",
		MeasuredAt: time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC), Seconds: 3.5}
}

// A speed with its GPUs survives JSON as it was: the agent keeps it in
// speed.json and publishes it in the node's identity. One without GPUs
// marshals as before they existed (no "gpus" key).
func TestSpeedJSONRoundTrip(t *testing.T) {
	plain := testSpeed()
	b, err := json.Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(`"gpus"`)) {
		t.Errorf("a speed without GPUs marshals a gpus key: %s", b)
	}
	sp := testSpeed()
	sp.GPUs = []GPUSpeed{{
		Device: Device{ID: "6d657361-3232", Library: "Vulkan", Name: "Vulkan0", Description: "llvmpipe (LLVM 15.0.6, 256 bits)",
			TotalBytes: 2 << 30, FreeBytes: 2 << 30, Software: true},
		MemBytesPerSec: 5e8, StreamRatio: 1.4, LayerMicros: 9000, TokenMicros: 2500, CrossMicros: 8000, Seconds: 38,
		Types: map[string]TypeSpeed{"Q8_0": {DecodeBytesPerSec: 2e8, PrefillFlopsPerSec: 6e8, BitsPerWeight: 8.5}},
	}, {
		Device: Device{ID: "0", Library: "Metal", Name: "Metal", TotalBytes: 100 << 30, FreeBytes: 90 << 30, Unified: true},
		Error:  "signal: killed",
	}}
	b, err = json.Marshal(sp)
	if err != nil {
		t.Fatal(err)
	}
	var back Speed
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, sp) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, sp)
	}
	for _, key := range []string{`"gpus":[`, `"crossMicros":8000`, `"unified":true`, `"software":true`, `"error":"signal: killed"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
	// The measured GPU is found by id and library; the one whose
	// measurement failed is listed but not usable.
	if g, ok := back.GPU("6d657361-3232", "Vulkan"); !ok || g.CrossMicros != 8000 {
		t.Errorf("GPU(Vulkan): %+v %v", g, ok)
	}
	if _, ok := back.GPU("0", "Metal"); ok {
		t.Error("GPU(Metal): a failed measurement counts as measured")
	}
	if _, ok := back.GPU("6d657361-3232", "CUDA"); ok {
		t.Error("GPU found under another library")
	}
	if ds := back.Devices(); len(ds) != 2 || ds[0].Name != "Vulkan0" || !ds[1].Unified {
		t.Errorf("Devices: %+v", ds)
	}
	if err := back.GPUs[1].Check(); err == nil || !strings.Contains(err.Error(), "signal: killed") {
		t.Errorf("a failed GPU's Check: %v", err)
	}
	if err := back.GPUs[0].Check(); err != nil {
		t.Errorf("a measured GPU's Check: %v", err)
	}
}
