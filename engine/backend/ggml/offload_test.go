package ggml

import (
	"context"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

func testGLs() (out []runnerapi.GPULayers) {
	for _, f := range strings.Fields(os.Getenv("TGL")) {
		n, _ := strconv.Atoi(f)
		out = append(out, runnerapi.GPULayers(n))
	}
	return out
}

func TestOffloadExperiment(t *testing.T) {
	if os.Getenv(gpuLibEnv) == "" {
		t.Skip("no GPU lib")
	}
	o := model.Presets["tiny"]
	if t := os.Getenv("TTYPE"); t != "" {
		o.Type = t
	}
	if a := os.Getenv("TARCH"); a != "" {
		o = modeltest.Family(t, o, a)
	}
	path := modeltest.Generate(t, "tiny.gguf", o)
	ids := []int32{1, 5, 9, 100, 200, 7, 3}
	if os.Getenv("TLONG") != "" {
		for len(ids) < 40 {
			ids = append(ids, int32(10+len(ids)))
		}
	}
	run := func(gl runnerapi.GPULayers) ([]float32, runnerapi.Offload) {
		r, err := Load(context.Background(), path, backend.Options{Threads: 2, GPULayers: gl, GPUSoftware: true, ContextLen: 128, NoRepack: os.Getenv("NOREPACK") != ""}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if os.Getenv("NOCLOSE") == "" {
			defer r.Close()
		}
		pos := make([]int32, len(ids))
		for i := range pos {
			pos[i] = int32(i)
		}
		res, err := r.Forward(context.Background(), backend.Batch{Tokens: ids, Positions: pos, AllLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("repacked %d", r.Repacked)
		return res.Logits, r.Offload()
	}
	cpu, oc := run(0)
	if os.Getenv("NOCPU") != "" {
	}
	t.Logf("cpu: %+v", oc)
	for _, gl := range testGLs() {
		gpu, og := run(gl)
		t.Logf("gpu %v: %s %+v", gl, og, og)
		var d, n float64
		mx := 0.0
		for i := range cpu {
			e := float64(cpu[i] - gpu[i])
			d += e * e
			n += float64(cpu[i]) * float64(cpu[i])
			mx = math.Max(mx, math.Abs(e))
		}
		t.Logf("nmse %.3g max %.3g", d/n, mx)
	}
}
