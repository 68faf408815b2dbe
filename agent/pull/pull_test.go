package pull

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/pull/pulltest"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

func content(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// target resolves repo's quant file on the fake hub into a fetch target
// in a fresh cache dir.
func target(t *testing.T, h *pulltest.Hub, ref string) (HF, HFCache, HFFile, Target) {
	t.Helper()
	hf := HF{Endpoint: h.URL()}
	r, ok, err := ParseHFRef(ref)
	if !ok || err != nil {
		t.Fatalf("parse %s: %v %v", ref, ok, err)
	}
	files, err := hf.Files(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	cache := HFCache{Dir: t.TempDir()}
	f := files[0]
	return hf, cache, f, Target{URL: hf.ResolveURL(r.Repo, f.Path), Size: f.Size, SHA256: f.SHA256, Dest: cache.Blob(r.Repo, f.SHA256)}
}

func noSleep(waits *[]time.Duration, mu *sync.Mutex) func(context.Context, time.Duration) error {
	return func(_ context.Context, d time.Duration) error {
		mu.Lock()
		*waits = append(*waits, d)
		mu.Unlock()
		return nil
	}
}

// A pull through the hub's redirect to the CDN, in parallel ranged
// chunks, lands verified in the HF cache layout.
func TestPullIntoHFCache(t *testing.T) {
	h := pulltest.NewHub(t)
	data := content(1<<20+12345, 1)
	h.Add("org/Model-GGUF", "model-Q4_K_M.gguf", data)
	h.Add("org/Model-GGUF", "model-Q8_0.gguf", content(1000, 2))
	hf, cache, file, tg := target(t, h, "hf.co/org/Model-GGUF")
	if file.Path != "model-Q4_K_M.gguf" {
		t.Fatalf("default quant picked %s", file.Path)
	}
	var last int64
	st, err := (&Fetcher{Chunk: 64 << 10, Workers: 4}).Fetch(context.Background(), tg, func(done, size int64) { last = done })
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(tg.Dest)
	if !bytes.Equal(got, data) || last != int64(len(data)) || !st.Ranged || st.Fetched != int64(len(data)) {
		t.Fatalf("fetched %d bytes (equal %v), progress %d, stats %+v", len(got), bytes.Equal(got, data), last, st)
	}
	if n := h.Requests.Load(); n != 17 {
		t.Errorf("%d CDN requests for 17 chunks", n)
	}
	commit, err := hf.Commit(context.Background(), "org/Model-GGUF")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := cache.Link("org/Model-GGUF", commit, file)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(snap); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("snapshot link %s: %v", snap, err)
	}
	want := filepath.Join(cache.Dir, "models--org--Model-GGUF", "snapshots", commit, "model-Q4_K_M.gguf")
	if snap != want {
		t.Errorf("snapshot %s, want %s", snap, want)
	}
	if ref, _ := os.ReadFile(filepath.Join(cache.RepoDir("org/Model-GGUF"), "refs", "main")); string(ref) != commit {
		t.Errorf("refs/main = %q", ref)
	}
	if _, err := os.Stat(tg.Dest + partSuffix); !os.IsNotExist(err) {
		t.Error("the part file is still there")
	}
}

// Connections cut mid-chunk, then a run stopped mid-way (as by kill -9)
// and started again: the file completes, and the bytes already in are
// not fetched again.
func TestPullResumes(t *testing.T) {
	h := pulltest.NewHub(t)
	data := content(2<<20, 3)
	h.Add("org/R", "r-Q4_K_M.gguf", data)
	_, _, _, tg := target(t, h, "hf.co/org/R")
	h.CutAfter, h.CutTimes = 10_000, 3
	var waits []time.Duration
	var mu sync.Mutex
	f := &Fetcher{Chunk: 128 << 10, Workers: 2, Sleep: noSleep(&waits, &mu)}

	// Run 1: stopped once half the file is in.
	ctx, cancel := context.WithCancel(context.Background())
	_, err := f.Fetch(ctx, tg, func(done, size int64) {
		if done > size/2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("run 1: %v, want canceled", err)
	}
	served1 := h.Served.Load()
	// Run 2: a new fetcher, as after a restart.
	st, err := (&Fetcher{Chunk: 64 << 10, Workers: 4}).Fetch(context.Background(), tg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(tg.Dest); !bytes.Equal(got, data) {
		t.Fatal("resumed file differs")
	}
	served := h.Served.Load()
	t.Logf("resume: %d bytes served for a %d-byte file (run 1: %d, of which 30 000 in 3 cut responses; run 2 resumed %d, fetched %d)",
		served, len(data), served1, st.Resumed, st.Fetched)
	if st.Resumed < int64(len(data))/2-128<<10 || st.Resumed+st.Fetched != int64(len(data)) {
		t.Errorf("run 2 resumed %d and fetched %d of %d", st.Resumed, st.Fetched, len(data))
	}
	// Not re-fetched: at most the chunks in flight when run 1 stopped,
	// and the three cut responses.
	if waste := served - int64(len(data)); waste > 2*128<<10+30_000 {
		t.Errorf("%d bytes fetched twice", waste)
	}
}

// Faults: 503 with Retry-After is waited out as the server asks; a server
// that ignores Range still yields the file; a slow one too; a wrong
// digest deletes the download and says so.
func TestPullFaults(t *testing.T) {
	t.Run("retry-after", func(t *testing.T) {
		h := pulltest.NewHub(t)
		data := content(300_000, 4)
		h.Add("org/B", "b-Q4_K_M.gguf", data)
		_, _, _, tg := target(t, h, "hf.co/org/B")
		h.Busy = 2
		var waits []time.Duration
		var mu sync.Mutex
		st, err := (&Fetcher{Chunk: 1 << 20, Sleep: noSleep(&waits, &mu)}).Fetch(context.Background(), tg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(waits) != 2 || waits[0] != time.Second || waits[1] != time.Second || st.Attempts != 3 {
			t.Errorf("waits %v (want Retry-After's 1 s twice), %d attempts", waits, st.Attempts)
		}
	})
	t.Run("ignores range", func(t *testing.T) {
		h := pulltest.NewHub(t)
		data := content(500_000, 5)
		h.Add("org/I", "i-Q4_K_M.gguf", data)
		_, _, _, tg := target(t, h, "hf.co/org/I")
		h.IgnoreRange = true
		st, err := (&Fetcher{Chunk: 64 << 10, Workers: 4}).Fetch(context.Background(), tg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(tg.Dest); !bytes.Equal(got, data) || st.Ranged {
			t.Errorf("ignored Range: equal %v, stats %+v", bytes.Equal(got, data), st)
		}
	})
	t.Run("slow", func(t *testing.T) {
		h := pulltest.NewHub(t)
		data := content(100_000, 6)
		h.Add("org/S", "s-Q4_K_M.gguf", data)
		_, _, _, tg := target(t, h, "hf.co/org/S")
		h.SlowPerSec = 50_000
		var reports int
		start := time.Now()
		if _, err := (&Fetcher{Chunk: 1 << 20}).Fetch(context.Background(), tg, func(int64, int64) { reports++ }); err != nil {
			t.Fatal(err)
		}
		t.Logf("100 kB at 50 kB/s: %v, %d progress reports", time.Since(start).Round(time.Millisecond), reports)
		if reports < 10 {
			t.Errorf("%d progress reports over a slow download", reports)
		}
	})
	t.Run("wrong digest", func(t *testing.T) {
		h := pulltest.NewHub(t)
		h.Add("org/W", "w-Q4_K_M.gguf", content(200_000, 7))
		h.SHA["org/W/w-Q4_K_M.gguf"] = strings.Repeat("ab", 32)
		_, _, _, tg := target(t, h, "hf.co/org/W")
		_, err := (&Fetcher{Chunk: 64 << 10}).Fetch(context.Background(), tg, nil)
		if err == nil || !strings.Contains(err.Error(), "sha256 mismatch") || !strings.Contains(err.Error(), "deleted") {
			t.Fatalf("wrong digest: %v", err)
		}
		for _, p := range []string{tg.Dest, tg.Dest + partSuffix, tg.Dest + stateSuffix} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s left behind", p)
			}
		}
	})
	t.Run("disk full", func(t *testing.T) {
		h := pulltest.NewHub(t)
		h.Add("org/D", "d-Q4_K_M.gguf", content(200_000, 8))
		_, _, _, tg := target(t, h, "hf.co/org/D")
		f := &Fetcher{FreeBytes: func(string) (uint64, error) { return 1000, nil }}
		if _, err := f.Fetch(context.Background(), tg, nil); err == nil || !strings.Contains(err.Error(), "needs 200000 more bytes") {
			t.Fatalf("no room: %v", err)
		}
	})
}

// Bad input is refused with a clear error, and nothing is written
// outside the cache.
func TestPullRefusesBadInput(t *testing.T) {
	for _, ref := range []string{"hf.co/../etc", "hf.co/org/../x", "hf.co//abs", "hf.co/a/b/c", "hf.co/org/repo:bad/tag", "hf.co/.hidden/x"} {
		if _, ok, err := ParseHFRef(ref); !ok || err == nil {
			t.Errorf("%s: ok %v, err %v", ref, ok, err)
		}
	}
	if _, ok, _ := ParseHFRef("qwen3:8b"); ok {
		t.Error("an Ollama name taken as hf.co")
	}
	r := HFRef{Repo: "org/x", Quant: "Q4_K_M"}
	lfs := func(size int64) *struct {
		Oid  string `json:"oid"`
		Size int64  `json:"size"`
	} {
		return &struct {
			Oid  string `json:"oid"`
			Size int64  `json:"size"`
		}{strings.Repeat("a", 64), size}
	}
	for name, tree := range map[string][]treeEntry{
		"outside":   {{Type: "file", Path: "../x-Q4_K_M.gguf", LFS: lfs(10)}},
		"absolute":  {{Type: "file", Path: "/etc/x-Q4_K_M.gguf", LFS: lfs(10)}},
		"huge":      {{Type: "file", Path: "x-Q4_K_M.gguf", LFS: lfs(11 << 40)}},
		"no digest": {{Type: "file", Path: "x-Q4_K_M.gguf"}},
		"no quant":  {{Type: "file", Path: "x-Q8_0.gguf", LFS: lfs(10)}},
		"parts missing": {{Type: "file", Path: "x-Q4_K_M-00001-of-00003.gguf", LFS: lfs(10)},
			{Type: "file", Path: "x-Q4_K_M-00003-of-00003.gguf", LFS: lfs(10)}},
	} {
		if _, err := pickFiles(r, tree); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	split := []treeEntry{{Type: "file", Path: "x-Q4_K_M-00002-of-00002.gguf", LFS: lfs(10)},
		{Type: "file", Path: "x-Q4_K_M-00001-of-00002.gguf", LFS: lfs(10)}}
	if fs, err := pickFiles(r, split); err != nil || len(fs) != 2 || fs[0].Path != "x-Q4_K_M-00001-of-00002.gguf" {
		t.Errorf("split: %+v %v", fs, err)
	}
	// Endless redirects end with an error that says so.
	h := pulltest.NewHub(t)
	h.Add("org/L", "l-Q4_K_M.gguf", content(1000, 9))
	_, _, _, tg := target(t, h, "hf.co/org/L")
	h.Redirects = 50
	if _, err := (&Fetcher{MaxAttempts: 1}).Fetch(context.Background(), tg, nil); err == nil || !strings.Contains(err.Error(), "redirects") {
		t.Errorf("endless redirects: %v", err)
	}
	// A commit that is not a plain name cannot become a path.
	if _, err := (HFCache{Dir: t.TempDir()}).Link("org/L", "../../x", HFFile{Path: "a.gguf", SHA256: strings.Repeat("a", 64)}); err == nil {
		t.Error("a commit with '..' was linked")
	}
}

// A pull whose CDN goes silent on one connection mid-chunk (socket open,
// no bytes, no FIN) and trickles a byte a second on another completes:
// each such connection is given up after the stall window and its chunk
// resumes from its last byte on a new one. The download's state counts
// the retries and stalls, each stall is logged once with the host, and
// nothing but what was in flight on the dropped connections is fetched
// twice (at most one chunk).
func TestPullSurvivesStalls(t *testing.T) {
	start := time.Now()
	h := pulltest.NewHub(t)
	data := content(3*DefaultChunk+12345, 5)
	h.Add("org/Stall-GGUF", "stall-Q8_0.gguf", data)
	h.Stall(1<<20, 1, 1)
	var logs testutil.SyncBuffer
	var mu sync.Mutex
	var last state.Download
	p := New(Config{Self: "n1", HFCache: t.TempDir(), HF: HF{Endpoint: h.URL()}, Fetcher: &Fetcher{Stall: time.Second},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Publish: func(ev state.Event) error {
			mu.Lock()
			last = ev.(state.DownloadProgress).Download
			mu.Unlock()
			return nil
		}})
	defer p.Close()
	j, _, err := p.start("hf.co/org/Stall-GGUF:Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.done:
	case <-time.After(50 * time.Second):
		t.Fatalf("the pull hung: %+v\n%s", j.snapshot(), logs.String())
	}
	mu.Lock()
	d := last
	mu.Unlock()
	if d.Status != state.DownloadDone || d.Bytes != int64(len(data)) {
		t.Fatalf("download ended %+v\n%s", d, logs.String())
	}
	if d.Stalls != 2 || d.Retries < 2 {
		t.Errorf("download state: %d stalls, %d retries; want 2 stalls (the silent and the trickling connection)", d.Stalls, d.Retries)
	}
	cdn := strings.TrimPrefix(h.CDNURL(), "http://")
	if n := strings.Count(logs.String(), "download stalled"); n != 2 || !strings.Contains(logs.String(), "host="+cdn) {
		t.Errorf("%d stall log lines, want 2 naming the CDN host %s:\n%s", n, cdn, logs.String())
	}
	over := h.Served.Load() - int64(len(data))
	if over > DefaultChunk {
		t.Errorf("the CDN served %d bytes more than the file: more than one chunk fetched twice", over)
	}
	t.Logf("pull of %d bytes through a stalled and a trickling connection: %v, %d stalls, %d retries, %d bytes fetched twice",
		len(data), time.Since(start).Round(time.Millisecond), d.Stalls, d.Retries, over)
}
