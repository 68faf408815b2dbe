package runnerapi

import (
	"encoding/json"
	"flag"
	"io"
	"testing"
)

// GPULayers reads and writes "auto" or a number, as a flag and in JSON,
// and refuses anything else.
func TestGPULayersText(t *testing.T) {
	for _, c := range []struct {
		json string
		want GPULayers
	}{{`"auto"`, GPUAuto}, {`0`, 0}, {`12`, 12}, {`"7"`, 7}} {
		var g GPULayers
		if err := json.Unmarshal([]byte(c.json), &g); err != nil || g != c.want {
			t.Errorf("%s: %v, %v; want %v", c.json, g, err, c.want)
			continue
		}
		b, err := json.Marshal(g)
		if err != nil {
			t.Fatal(err)
		}
		var back GPULayers
		if err := json.Unmarshal(b, &back); err != nil || back != g {
			t.Errorf("%s: wrote %s, read back %v, %v", c.json, b, back, err)
		}
	}
	if b, _ := json.Marshal(GPUAuto); string(b) != `"auto"` {
		t.Errorf("auto marshals as %s", b)
	}
	for _, bad := range []string{`-1`, `"-3"`, `""`, `"all"`, `1.5`, `true`, `{}`} {
		var g GPULayers
		if err := json.Unmarshal([]byte(bad), &g); err == nil {
			t.Errorf("%s: read as %v, want an error", bad, g)
		}
	}
	// A pointer field: absent and null are nil (each node's default).
	var req struct {
		G *GPULayers `json:"gpuLayers,omitempty"`
	}
	for _, body := range []string{`{}`, `{"gpuLayers":null}`} {
		if err := json.Unmarshal([]byte(body), &req); err != nil || req.G != nil {
			t.Errorf("%s: %v, %v; want nil", body, req.G, err)
		}
	}
	if b, _ := json.Marshal(req); string(b) != `{}` {
		t.Errorf("nil writes %s, want {}", b)
	}

	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	g := GPUAuto
	fs.Var(&g, "gpu-layers", "")
	if err := fs.Parse([]string{"--gpu-layers", "3"}); err != nil || g != 3 {
		t.Errorf("--gpu-layers 3: %v, %v", g, err)
	}
	if err := fs.Parse([]string{"--gpu-layers", "auto"}); err != nil || g != GPUAuto {
		t.Errorf("--gpu-layers auto: %v, %v", g, err)
	}
	if err := fs.Parse([]string{"--gpu-layers", "most"}); err == nil {
		t.Errorf("--gpu-layers most: accepted as %v", g)
	}
}

// Offload's String is what logs and the UI show.
func TestOffloadString(t *testing.T) {
	dev := &Device{Name: "Vulkan0", Description: "llvmpipe (LLVM 15.0.6, 256 bits)"}
	for _, c := range []struct {
		o    Offload
		want string
	}{
		{Offload{Total: 16, Reason: "no GPU"}, "CPU"},
		{Offload{Device: dev, Blocks: 12, Total: 16}, "12/16 blocks on Vulkan0"},
		{Offload{Device: dev, Blocks: 16, Total: 16, Head: true}, "16/16 blocks and the head on Vulkan0"},
	} {
		if got := c.o.String(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}
