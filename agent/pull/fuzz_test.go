package pull

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// References from users and file lists from servers: whatever they hold,
// a path that is accepted stays inside the store it is joined to.
func FuzzParseRefs(f *testing.F) {
	for _, s := range []string{"hf.co/org/repo:Q4_K_M", "hf.co/../x", "qwen3:8b", "ns/name:tag", "a/b/c", "hf.co/a/b:c:d", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		if r, ok, err := ParseHFRef(ref); ok && err == nil {
			if strings.Contains(r.Repo, "..") || strings.Count(r.Repo, "/") != 1 || strings.HasPrefix(r.Repo, "/") {
				t.Fatalf("%q → repo %q", ref, r.Repo)
			}
			dir := HFCache{Dir: "/cache"}.RepoDir(r.Repo)
			if filepath.Dir(dir) != "/cache" {
				t.Fatalf("%q → %s, outside the cache", ref, dir)
			}
		}
		if r, err := ParseOllamaRef(ref); err == nil {
			for _, p := range []string{r.Namespace, r.Name, r.Tag} {
				if p == "" || p == "." || p == ".." || strings.ContainsAny(p, `/\`) {
					t.Fatalf("%q → %+v", ref, r)
				}
			}
		}
	})
}

// A manifest or a tree listing that passes the checks names only blobs
// and files inside the stores.
func FuzzServerLists(f *testing.F) {
	f.Add([]byte(`{"schemaVersion":2,"config":{"digest":"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":1}]}`))
	f.Add([]byte(`[{"type":"file","path":"x-Q4_K_M.gguf","lfs":{"oid":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":10}}]`))
	f.Add([]byte(`[{"type":"file","path":"../x-Q4_K_M.gguf","lfs":{"oid":"aa","size":10}}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Manifest
		if json.Unmarshal(b, &m) == nil && m.check() == nil {
			for _, l := range append([]Layer{m.Config}, m.Layers...) {
				if p := (OllamaStore{Dir: "/store"}).Blob(l.Digest); filepath.Dir(p) != "/store/blobs" {
					t.Fatalf("digest %q → %s", l.Digest, p)
				}
			}
		}
		var tree []treeEntry
		if json.Unmarshal(b, &tree) == nil {
			files, err := pickFiles(HFRef{Repo: "o/r", Quant: "Q4_K_M"}, tree)
			for _, fl := range files {
				if err != nil || safeRel(fl.Path) != nil || fl.Size <= 0 || fl.Size > MaxFileSize || len(fl.SHA256) != 64 {
					t.Fatalf("accepted %+v", fl)
				}
			}
		}
	})
}

// A part's state file from disk, whatever it holds, either matches the
// target or is started afresh; it never claims more than a chunk holds.
func FuzzPartState(f *testing.F) {
	f.Add([]byte(`{"url":"u","size":100,"sha256":"s","chunk":64,"have":[64,3]}`), false)
	f.Add([]byte(`{"size":100,"chunk":0,"have":[]}`), false)
	f.Add([]byte(`{"size":100,"sha256":"s","chunk":64,"have":[65,-1]}`), false)
	f.Add([]byte(`{"size":100,"sha256":"s","chunk":64,"spans":[[10,30],[50,40]],"have":[30,2]}`), true)
	f.Add([]byte(`{"size":100,"sha256":"s","chunk":64,"spans":[[10,300]],"have":[300]}`), true)
	f.Fuzz(func(t *testing.T, b []byte, ranged bool) {
		dir := t.TempDir()
		tg := Target{URL: "u", Size: 100, SHA256: "s", Dest: filepath.Join(dir, "f")}
		chunks := 2
		if ranged {
			tg.Ranges = [][2]int64{{10, 30}, {50, 40}}
		}
		os.WriteFile(tg.Dest+stateSuffix, b, 0o644)
		os.WriteFile(tg.Dest+partSuffix, make([]byte, 100), 0o644)
		ps, err := (&Fetcher{Chunk: 64}).loadState(tg)
		if err != nil || ps.Chunk <= 0 || len(ps.Have) != chunks || ps.chunks() != chunks {
			t.Fatalf("state %+v, %v", ps, err)
		}
		for i, h := range ps.Have {
			off, n := ps.span(i)
			if h < 0 || h > n || off < 0 || off+n > 100 || ranged && off != tg.Ranges[i][0] {
				t.Fatalf("chunk %d at %d+%d has %d", i, off, n, h)
			}
		}
	})
}

// A hub's Retry-After: whatever it says, the wait is 0..maxBackoff, and a
// number of seconds is that many (up to maxBackoff).
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "5", "-1", "9223372037", "99999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := retryAfter(v)
		if d < 0 || d > maxBackoff {
			t.Fatalf("Retry-After %q: wait %v, want 0..%v", v, d, maxBackoff)
		}
		if n, err := strconv.Atoi(v); err == nil && n >= 0 && d != min(time.Duration(min(n, 1<<20))*time.Second, maxBackoff) {
			t.Fatalf("Retry-After %q: wait %v", v, d)
		}
	})
}
