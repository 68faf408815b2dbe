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
	"testing"

	"github.com/orrery-cluster/orrery/agent/pull"
	"github.com/orrery-cluster/orrery/agent/pull/pulltest"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/supervisor"
	"github.com/orrery-cluster/orrery/engine/gguf"
	"github.com/orrery-cluster/orrery/engine/model"
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
	a = New(Config{Dir: filepath.Join(t.TempDir(), "shards"), Self: "a", Models: &model.Scanner{Dirs: model.Dirs{Orrery: models}},
		State: func() state.State { return st }, Holder: func(string) (string, error) { return "a", nil }})
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	peer := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		if !strings.HasPrefix(addr, "a:") {
			t.Errorf("dialled %s, want node a", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", srv.Listener.Addr().String())
	}}}
	b = New(Config{Dir: filepath.Join(t.TempDir(), "shards"), Self: "b", Models: &model.Scanner{Dirs: model.Dirs{Orrery: t.TempDir()}},
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
