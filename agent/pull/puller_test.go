package pull

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/pull/pulltest"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

func newPuller(t *testing.T, h *pulltest.Hub) (*Puller, *state.Store, chan struct{}) {
	store := state.NewStore(state.NewLog(256), state.NewMemoryHistory(time.Minute))
	seq := &state.LocalSequencer{Store: store}
	pulled := make(chan struct{}, 4)
	p := New(Config{Self: "a", HFCache: t.TempDir(), HF: HF{Endpoint: h.URL()}, Publish: seq.Publish,
		Fetcher: &Fetcher{Chunk: 32 << 10}, Pulled: func() { pulled <- struct{}{} }})
	t.Cleanup(p.Close)
	return p, store, pulled
}

// A pull's progress goes into the state, and ends Done with the model id
// the scanner gives the file; the same reference twice is one pull.
func TestPullerPublishesProgress(t *testing.T) {
	testutil.CheckLeaks(t)
	h := pulltest.NewHub(t)
	h.Add("org/M-GGUF", "m-Q8_0.gguf", content(600_000, 10))
	h.SlowPerSec = 50_000 // 4 workers: 200 kB/s, 3 s, progress every second
	p, store, pulled := newPuller(t, h)
	d, err := p.Pull("hf.co/org/M-GGUF:Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := p.Pull("hf.co/org/M-GGUF:Q8_0"); err != nil || again.ID != d.ID {
		t.Errorf("second pull of the same ref: %v %v", again.ID, err)
	}
	var mid state.Download
	testutil.WaitFor(t, "progress under way", func() bool {
		mid = store.State().Downloads[d.ID]
		return mid.Bytes > 0 && mid.Bytes < mid.Size && mid.MBps != nil
	})
	<-pulled
	done := store.State().Downloads[d.ID]
	if done.Status != state.DownloadDone || done.Bytes != 600_000 || done.Model != "org/M-GGUF/m-Q8_0" ||
		len(done.Files) != 1 || done.Files[0].Bytes != 600_000 {
		t.Fatalf("finished download %+v", done)
	}
	t.Logf("mid-way: %d of %d bytes at %.2f MB/s", mid.Bytes, mid.Size, *mid.MBps)
	snap := filepath.Join(p.cfg.HFCache, "models--org--M-GGUF", "snapshots", pulltest.Commit, "m-Q8_0.gguf")
	if _, err := os.Stat(snap); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"Bad Name", "hf.co/../x", "../../etc/passwd"} {
		if _, err := p.Pull(bad); !errors.Is(err, ErrBadRef) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// A canceled pull keeps its part; pulling again resumes it.
func TestPullerCancelAndResume(t *testing.T) {
	testutil.CheckLeaks(t)
	h := pulltest.NewHub(t)
	h.Add("org/C", "c-Q4_K_M.gguf", content(400_000, 11))
	h.SlowPerSec = 100_000
	p, store, pulled := newPuller(t, h)
	d, err := p.Pull("hf.co/org/C")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a third in", func() bool { return store.State().Downloads[d.ID].Bytes > 130_000 })
	if err := p.Cancel(d.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "canceled", func() bool { return store.State().Downloads[d.ID].Status == state.DownloadCanceled })
	if err := p.Cancel(d.ID); !errors.Is(err, ErrNoSuchPull) {
		t.Errorf("cancel of a finished pull: %v", err)
	}
	h.SlowPerSec = 0
	d2, err := p.Pull("hf.co/org/C")
	if err != nil {
		t.Fatal(err)
	}
	<-pulled
	got := store.State().Downloads[d2.ID]
	if got.Status != state.DownloadDone || got.Resumed < 100_000 {
		t.Fatalf("second pull: %+v", got)
	}
	t.Logf("resumed %d of %d bytes; the CDN served %d in all", got.Resumed, got.Size, h.Served.Load())
}
