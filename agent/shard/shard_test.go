package shard

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/pull"
	"github.com/orrery-cluster/orrery/agent/pull/pulltest"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/modelstore"
)

// twoNodes is a node "a" with the tiny model and a node "b" without it;
// b reaches a's shard handler as http://a/… through a real HTTP server.
func twoNodes(t *testing.T) (a, b *Cache, in state.Instance) {
	t.Helper()
	models := filepath.Join(t.TempDir(), "models")
	os.MkdirAll(models, 0o700)
	if err := model.Generate(filepath.Join(models, "tiny.gguf"), model.Presets["tiny"]); err != nil {
		t.Fatal(err)
	}
	in = state.Instance{InstanceID: "inst-1", ModelID: "tiny", NodeID: "a", Ranks: []state.ShardRange{
		{Rank: 0, NodeID: "a", FirstLayer: 0, LastLayer: 2}, {Rank: 1, NodeID: "b", FirstLayer: 2, LastLayer: 4}}}
	st := state.State{NodeIdentities: map[string]state.NodeIdentity{"a": {}, "b": {}}}
	a = New(Config{Dir: filepath.Join(t.TempDir(), "shards"), Self: "a", Models: &modelstore.Scanner{Dirs: modelstore.Dirs{Orrery: models}},
		State: func() state.State { return st }, Holder: func(string) (string, error) { return "a", nil }})
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	peer := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		if !strings.HasPrefix(addr, "a:") {
			t.Errorf("dialled %s, want node a", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}}}
	b = New(Config{Dir: filepath.Join(t.TempDir(), "shards"), Self: "b", Models: &modelstore.Scanner{Dirs: modelstore.Dirs{Orrery: t.TempDir()}},
		Peer: peer, State: func() state.State { return st }, Holder: func(string) (string, error) { return "a", nil }})
	return a, b, in
}

func TestCutLocally(t *testing.T) {
	a, _, in := twoNodes(t)
	path, info, err := a.ModelFile(context.Background(), in, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.How != "built" || info.Bytes <= 0 {
		t.Fatalf("info %+v, want a built shard", info)
	}
	f, err := gguf.ReadFile(path)
	if err != nil {
		t.Fatalf("the cut shard does not read back: %v", err)
	}
	cfg, err := model.FromGGUF(f)
	if first, last := cfg.Blocks(); err != nil || first != 0 || last != 2 {
		t.Fatalf("shard holds blocks [%d, %d) (%v), want [0, 2)", first, last, err)
	}
	// The second request is served from the cache: the same file.
	again, _, err := a.ModelFile(context.Background(), in, 0, nil)
	if err != nil || again != path {
		t.Fatalf("second cut: %s, %v; want the cached %s", again, err, path)
	}
}

func TestFetchFromPeer(t *testing.T) {
	_, b, in := twoNodes(t)
	var last supervisor.Progress
	path, info, err := b.ModelFile(context.Background(), in, 1, func(p supervisor.Progress) { last = p })
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.How != "transfer" || info.From != "a" || info.Bytes != st.Size() {
		t.Fatalf("info %+v, file %d bytes", info, st.Size())
	}
	if last.Done != st.Size() || last.Size != st.Size() || last.From != "a" {
		t.Fatalf("last progress %+v, want all %d bytes from a", last, st.Size())
	}
	if _, err := gguf.ReadFile(path); err != nil {
		t.Fatalf("the received shard does not read: %v", err)
	}
	// Only the shard is in the cache: no temp file is left.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("cache holds %v", ents)
	}
	// A second fetch finds it cached.
	_, info, err = b.ModelFile(context.Background(), in, 1, func(supervisor.Progress) {})
	if err != nil || info.How != "model" {
		t.Fatalf("second fetch: %+v, %v; want the cached shard", info, err)
	}
}

func TestServeRefusesBadRanges(t *testing.T) {
	a, _, _ := twoNodes(t)
	for _, q := range []string{"model=tiny&first=2&last=2", "model=tiny&first=-1&last=2", "model=tiny&first=0&last=9", "model=tiny&first=x&last=2"} {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path+"?"+q, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "4-layer model") {
			t.Errorf("%s: %d %s", q, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path+"?model=nope&first=0&last=1", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("unknown model: %d", rec.Code)
	}
}

// sourced is the instance as placed from the hub, where a's model also
// is, and b with a puller that reaches that hub.
func sourced(t *testing.T, a, b *Cache, in state.Instance) (*pulltest.Hub, state.Instance, *Cache) {
	t.Helper()
	e, _ := a.cfg.Models.Find("tiny")
	data, err := os.ReadFile(e.Path)
	if err != nil {
		t.Fatal(err)
	}
	h := pulltest.NewHub(t)
	h.Add("org/Tiny-GGUF", "tiny-F32.gguf", data)
	p := pull.New(pull.Config{Self: "b", HF: pull.HF{Endpoint: h.URL()}, HFCache: t.TempDir(),
		Fetcher: &pull.Fetcher{MaxAttempts: 2}, Publish: func(state.Event) error { return nil }})
	t.Cleanup(p.Close)
	src, err := p.Resolve(context.Background(), "hf.co/org/Tiny-GGUF:F32")
	if err != nil {
		t.Fatal(err)
	}
	src.Model = "tiny" // as a names it, so that a is its holder
	in.ModelID, in.Source = src.Ref, &src
	cfg := b.cfg
	cfg.Puller = p
	return h, in, New(cfg)
}

// A rank of an instance placed from the hub pulls only its tensors, and
// the shard is the one a cuts from the whole file.
func TestPullFromSource(t *testing.T) {
	a, b, in := twoNodes(t)
	h, in, b := sourced(t, a, b, in)
	var last supervisor.Progress
	path, info, err := b.ModelFile(context.Background(), in, 1, func(p supervisor.Progress) { last = p })
	if err != nil {
		t.Fatal(err)
	}
	if info.How != "pull" || info.From != in.Source.Ref || info.Bytes != h.Served.Load() || info.Bytes >= in.Source.Size {
		t.Fatalf("info %+v; the hub served %d bytes of a %d-byte model", info, h.Served.Load(), in.Source.Size)
	}
	if last.From != in.Source.Ref || last.Done != last.Size || last.Size == 0 {
		t.Errorf("last progress %+v", last)
	}
	in.ModelID, in.Source = "tiny", nil
	cut, _, err := a.ModelFile(context.Background(), in, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want, _ := os.ReadFile(cut)
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("the pulled shard (%d bytes) differs from a's cut (%d)", len(got), len(want))
	}
}

// When the hub stops serving the tensors, the rank falls back to a node
// that has the model whole, over the peer link.
func TestPullFallsBackToPeer(t *testing.T) {
	a, b, in := twoNodes(t)
	h, in, b := sourced(t, a, b, in)
	h.FailRanges = http.StatusNotFound
	path, info, err := b.ModelFile(context.Background(), in, 1, func(supervisor.Progress) {})
	if err != nil {
		t.Fatal(err)
	}
	if info.How != "transfer" || info.From != "a" {
		t.Fatalf("info %+v, want a transfer from a", info)
	}
	if _, err := gguf.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	// With no node to fall back to, the error is the pull's.
	b.cfg.Holder = func(id string) (string, error) { return "", errors.New("no node has " + id) }
	in.Ranks[1].FirstLayer = 1 // another shard: not cached
	in.Ranks[0].LastLayer = 1
	if _, _, err := b.ModelFile(context.Background(), in, 1, func(supervisor.Progress) {}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("got %v, want the hub's 404", err)
	}
	// A source whose digest is not one never names a file.
	bad := *in.Source
	bad.SHA256 = "../outside-shard" + strings.Repeat("0", 48) // 64 characters
	outside := filepath.Join(filepath.Dir(b.cfg.Dir), "outside-shard-1-4.gguf")
	if err := os.WriteFile(outside, []byte("not a shard"), 0o600); err != nil {
		t.Fatal(err)
	}
	evil := in
	evil.Source = &bad
	if _, _, err := b.ModelFile(context.Background(), evil, 1, func(supervisor.Progress) {}); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a path as the source's sha256: %v", err)
	}
}

// faultyPeer serves a's shards, but the first answer goes silent after
// stallAfter bytes (the socket held open) and the second trickles a byte
// at a time; it counts the bytes it sent.
type faultyPeer struct {
	h          http.Handler
	stallAfter int64
	calls      atomic.Int32
	sent       atomic.Int64
	ranges     []string
	mu         sync.Mutex
}

func (f *faultyPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.ranges = append(f.ranges, r.Header.Get("Range"))
	f.mu.Unlock()
	fw := &faultyWriter{ResponseWriter: w, f: f, call: f.calls.Add(1), ctx: r.Context()}
	f.h.ServeHTTP(fw, r)
}

type faultyWriter struct {
	http.ResponseWriter
	f    *faultyPeer
	call int32
	ctx  context.Context
	n    int64
}

func (w *faultyWriter) Write(p []byte) (int, error) {
	switch w.call {
	case 1: // silent after stallAfter bytes
		if w.n+int64(len(p)) > w.f.stallAfter {
			k := w.f.stallAfter - w.n
			w.ResponseWriter.Write(p[:k])
			w.f.sent.Add(k)
			w.ResponseWriter.(http.Flusher).Flush()
			<-w.ctx.Done()
			return int(k), w.ctx.Err()
		}
	case 2: // a byte every 50 ms
		for i := range p {
			w.ResponseWriter.Write(p[i : i+1])
			w.f.sent.Add(1)
			w.ResponseWriter.(http.Flusher).Flush()
			select {
			case <-w.ctx.Done():
				return i + 1, w.ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		return len(p), nil
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	w.f.sent.Add(int64(n))
	return n, err
}

// A shard transfer whose first connection goes silent mid-shard and whose
// second trickles completes: each is given up after the stall window, and
// the next attempt asks only for the bytes not in yet.
func TestFetchSurvivesStalls(t *testing.T) {
	a, b, in := twoNodes(t)
	fp := &faultyPeer{h: a, stallAfter: 40 << 10}
	srv := httptest.NewServer(fp)
	t.Cleanup(srv.Close)
	b.cfg.Peer = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}}}
	b.cfg.Stall = 300 * time.Millisecond
	start := time.Now()
	path, info, err := b.ModelFile(context.Background(), in, 1, func(supervisor.Progress) {})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if info.How != "transfer" || info.Bytes != st.Size() {
		t.Fatalf("info %+v, file %d bytes", info, st.Size())
	}
	if _, err := gguf.ReadFile(path); err != nil {
		t.Fatalf("the received shard does not read: %v", err)
	}
	fp.mu.Lock()
	ranges := fp.ranges
	fp.mu.Unlock()
	if len(ranges) != 3 || ranges[0] != "" || !strings.HasPrefix(ranges[1], "bytes=40960-") || ranges[2] == ranges[1] {
		t.Errorf("requests' ranges %q: want the whole shard, then from byte 40960, then from where the trickle stopped", ranges)
	}
	if over := fp.sent.Load() - st.Size(); over > 64<<10 {
		t.Errorf("%d bytes sent twice", over)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("cache holds %v: a part file was left", ents)
	}
	t.Logf("shard of %d bytes through a silent and a trickling connection in %v; %d bytes sent in all", st.Size(), time.Since(start).Round(time.Millisecond), fp.sent.Load())
}
