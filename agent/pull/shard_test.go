package pull

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/agent/pull/pulltest"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/model/modeltest"
	"github.com/orrery-cluster/orrery/engine/split"
)

// shardModel is an 8-block Q8_0 model on the fake hub, with its bytes
// on disk for a local cut to compare with.
func shardModel(t *testing.T) (*pulltest.Hub, string, []byte) {
	t.Helper()
	o := model.Presets["small"]
	o.Dim, o.FFDim, o.Vocab = 256, 704, 2048
	local := modeltest.Generate(t, "m-Q8_0.gguf", o)
	data, err := os.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	h := pulltest.NewHub(t)
	h.Add("org/M-GGUF", "m-Q8_0.gguf", data)
	return h, local, data
}

func shardPuller(h *pulltest.Hub) *Puller {
	return New(Config{Self: "n1", HF: HF{Endpoint: h.URL()}, HFCache: filepath.Join(os.TempDir(), "unused"),
		Fetcher: &Fetcher{Chunk: 256 << 10}, Publish: func(state.Event) error { return nil }})
}

// Each rank's shard, built from only its tensors' byte ranges on the hub,
// is byte for byte the shard cut from the whole file; the ranks together
// fetch about the model once, each a part of it.
func TestShardPull(t *testing.T) {
	h, local, data := shardModel(t)
	p := shardPuller(h)
	defer p.Close()
	ctx := context.Background()
	src, err := p.Resolve(ctx, "hf.co/org/M-GGUF:Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	if src.Size != int64(len(data)) || src.File != "m-Q8_0.gguf" || src.Model != "org/M-GGUF/m-Q8_0" {
		t.Fatalf("source %+v", src)
	}
	dir := t.TempDir()
	var total int64
	for _, rg := range [][2]int{{0, 3}, {3, 6}, {6, 8}} {
		before := h.Served.Load()
		dst := filepath.Join(dir, "shard.gguf")
		st, err := p.Shard(ctx, src, rg[0], rg[1], dst, func(done, size int64) {})
		if err != nil {
			t.Fatal(err)
		}
		served := h.Served.Load() - before
		total += served
		t.Logf("blocks [%d, %d): header %d + ranges %d = %d bytes fetched of the model's %d (%.0f%%)", rg[0], rg[1],
			st.Header, st.Fetched, served, len(data), 100*float64(served)/float64(len(data)))
		if st.Fetched != st.Want || st.Resumed != 0 || served != st.Header+st.Fetched || served >= int64(len(data))*2/3 {
			t.Errorf("blocks [%d, %d): %+v, %d bytes served", rg[0], rg[1], st, served)
		}
		want := filepath.Join(dir, "cut.gguf")
		if err := split.WriteShard(local, want, rg[0], rg[1], src.SHA256); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(dst)
		exp, _ := os.ReadFile(want)
		if len(exp) == 0 || !bytes.Equal(got, exp) {
			t.Fatalf("blocks [%d, %d): the pulled shard (%d bytes) differs from the cut one (%d)", rg[0], rg[1], len(got), len(exp))
		}
		if _, err := os.Stat(PartPath(dst)); !os.IsNotExist(err) {
			t.Errorf("part file left: %v", err)
		}
		os.Remove(dst)
	}
	t.Logf("3 ranks: %d bytes fetched for a %d-byte model", total, len(data))
}

// A shard pull cut off half way (the agent killed) resumes: the second
// run fetches only the ranges that had not come.
func TestShardPullResumes(t *testing.T) {
	h, local, _ := shardModel(t)
	p := shardPuller(h)
	defer p.Close()
	src, err := p.Resolve(context.Background(), "hf.co/org/M-GGUF:Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "shard.gguf")
	ctx, cancel := context.WithCancel(context.Background())
	_, err = p.Shard(ctx, src, 0, 5, dst, func(done, size int64) {
		if done > size/2 {
			cancel()
		}
	})
	if err == nil {
		t.Fatal("a canceled shard pull succeeded")
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("a shard cut off is visible: %v", err)
	}
	st, err := p.Shard(context.Background(), src, 0, 5, dst, func(done, size int64) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed %d of %d bytes, fetched %d", st.Resumed, st.Want, st.Fetched)
	if st.Resumed < st.Want/2 || st.Resumed+st.Fetched != st.Want {
		t.Fatalf("second run: %+v", st)
	}
	want := filepath.Join(t.TempDir(), "cut.gguf")
	if err := split.WriteShard(local, want, 0, 5, src.SHA256); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	exp, _ := os.ReadFile(want)
	if !bytes.Equal(got, exp) {
		t.Fatal("the resumed shard differs from the cut one")
	}
}

// A server that ignores Range cannot serve a part of a file: the shard
// pull says so and leaves nothing.
func TestShardPullNeedsRange(t *testing.T) {
	h, _, _ := shardModel(t)
	p := shardPuller(h)
	defer p.Close()
	src, err := p.Resolve(context.Background(), "hf.co/org/M-GGUF:Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	h.IgnoreRange = true
	dst := filepath.Join(t.TempDir(), "shard.gguf")
	_, err = p.Shard(context.Background(), src, 2, 4, dst, func(done, size int64) {})
	if err == nil || !strings.Contains(err.Error(), "ignores Range") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("shard written: %v", err)
	}
}

// A source whose fields do not hold (from a peer's state) is refused
// before anything is fetched.
func TestShardSourceRefused(t *testing.T) {
	h, _, _ := shardModel(t)
	p := shardPuller(h)
	defer p.Close()
	good, err := p.Resolve(context.Background(), "hf.co/org/M-GGUF:Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range []func(*state.ModelSource){
		func(s *state.ModelSource) { s.File = "../../etc/passwd.gguf" },
		func(s *state.ModelSource) { s.File = "/abs.gguf" },
		func(s *state.ModelSource) { s.Ref = "hf.co/../x:Q8_0" },
		func(s *state.ModelSource) { s.SHA256 = "zz" },
		func(s *state.ModelSource) { s.Size = 11 << 40 },
	} {
		src := good
		mod(&src)
		if _, _, err := p.Header(context.Background(), src); err == nil {
			t.Errorf("source %+v accepted", src)
		}
	}
	if _, err := p.Resolve(context.Background(), "llama3:8b"); err == nil {
		t.Error("a registry name resolved as a shard source")
	}
}

// A tensor-parallel rank of a mixture pulls only its slice's bytes. Split
// whole (96 expert columns: 3 blocks, which 2 ranks cannot share evenly),
// that is its half of the experts (one range each), its heads' rows, and
// the matrices cut by columns about whole: under 60 % of the file. Split
// by columns (256: 8 blocks), each expert's down projection is cut by
// columns, a piece of every row, and the pieces of this small model's
// matrices lie closer than a request is worth, so it fetches about all of
// it. deepseek2's experts split whole, its latent attention by heads (the
// compressions whole). Either way the slice is byte for byte the one cut
// from the whole file.
func TestSlicePull(t *testing.T) {
	for _, c := range []struct {
		family  string
		eff     int
		columns bool
		most    float64
	}{{"qwen3moe", 96, false, 0.6}, {"qwen3moe", 256, true, 1}, {"deepseek2", 96, false, 0.7}} {
		o := model.Presets["small"]
		o.Dim, o.Vocab = 256, 2048
		o, err := model.ApplyFamily(o, c.family)
		if err != nil {
			t.Fatal(err)
		}
		o.ExpertFFDim = c.eff
		local := filepath.Join(t.TempDir(), "moe-Q8_0.gguf")
		if err := model.Generate(local, o); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(local)
		if err != nil {
			t.Fatal(err)
		}
		h := pulltest.NewHub(t)
		h.Add("org/MoE-GGUF", "moe-Q8_0.gguf", data)
		p := shardPuller(h)
		defer p.Close()
		ctx := context.Background()
		src, err := p.Resolve(ctx, "hf.co/org/MoE-GGUF:Q8_0")
		if err != nil {
			t.Fatal(err)
		}
		plan, err := split.PlanTPFile(local, 2)
		if err != nil {
			t.Fatal(err)
		}
		if plan[0].ExpertColumns != c.columns {
			t.Fatalf("experts of %d columns: %+v", c.eff, plan[0])
		}
		dir := t.TempDir()
		for rank := range 2 {
			before := h.Served.Load()
			dst := filepath.Join(dir, "slice.gguf")
			st, err := p.Slice(ctx, src, 0, o.Layers, rank, 2, dst, func(done, size int64) {})
			if err != nil {
				t.Fatal(err)
			}
			served := h.Served.Load() - before
			t.Logf("%s, experts of %d columns (by columns: %v), rank %d: header %d + ranges %d = %d bytes fetched of the model's %d (%.0f%%)",
				c.family, c.eff, c.columns, rank, st.Header, st.Fetched, served, len(data), 100*float64(served)/float64(len(data)))
			if st.Fetched != st.Want || served != st.Header+st.Fetched || float64(served) > c.most*float64(len(data)) {
				t.Errorf("rank %d: %+v, %d bytes served of %d", rank, st, served, len(data))
			}
			want := filepath.Join(dir, "cut.gguf")
			if err := split.WriteTPSlice(local, want, 0, o.Layers, plan[rank], src.SHA256); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(dst)
			exp, _ := os.ReadFile(want)
			if len(exp) == 0 || !bytes.Equal(got, exp) {
				t.Fatalf("rank %d: the pulled slice (%d bytes) differs from the cut one (%d)", rank, len(got), len(exp))
			}
			os.Remove(dst)
		}
		if _, err := p.Slice(ctx, src, 0, o.Layers, 2, 2, filepath.Join(dir, "x.gguf"), func(done, size int64) {}); err == nil || !strings.Contains(err.Error(), "rank 2 of a group of 2") {
			t.Errorf("rank 2 of 2: %v", err)
		}
	}
}
