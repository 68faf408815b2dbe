package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/pull/pulltest"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// A model pulled from a hub (the fake one: the hub's protocol, a CDN
// redirect, ranges), through the CLI and a real agent, lands in the HF
// cache, is listed and answers a chat; one from the registry lands in
// Ollama's store and is listed. A pull cut off by kill -9 of the agent
// resumes after a restart without fetching again what was in.
func TestPullProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (pulls through a real agent, killed and restarted): runs in make test")
	}
	bin := buildBinary(t)
	src := filepath.Join(t.TempDir(), "src")
	genModel(t, bin, src, "tiny-F32", "--preset", "tiny", "--seed", "7")
	data, err := os.ReadFile(filepath.Join(src, "models", "tiny-F32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	genModel(t, bin, src, "small-Q8_0", "--preset", "small")
	big, err := os.ReadFile(filepath.Join(src, "models", "small-Q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	hub := pulltest.NewHub(t)
	hub.Add("org/Tiny-GGUF", "tiny-F32.gguf", data)
	hub.Add("org/Big-GGUF", "big-Q8_0.gguf", big)
	hub.AddOllama("library", "tiny", "f32", map[string][]byte{"application/vnd.ollama.image.model": data,
		"application/vnd.ollama.image.params": []byte(`{"temperature":0}`)})
	home, dir := t.TempDir(), t.TempDir()
	env := []string{"HOME=" + home, "HF_ENDPOINT=" + hub.URL(), "HF_HUB_CACHE=", "HF_HOME=", "OLLAMA_MODELS="}
	addr := testutil.FreeAddr(t)
	p := startAgentEnv(t, bin, addr, dir, env, "--loopback-dir", t.TempDir(), "--registry", hub.URL())
	waitHealthy(t, p)

	out, err := exec.Command(bin, "pull", "--api", "http://"+addr, "hf.co/org/Tiny-GGUF:F32").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "model org/Tiny-GGUF/tiny-F32 is in") {
		t.Fatalf("orrery pull: %v\n%s", err, out)
	}
	snap := filepath.Join(home, ".cache", "huggingface", "hub", "models--org--Tiny-GGUF", "snapshots", pulltest.Commit, "tiny-F32.gguf")
	if got, err := os.ReadFile(snap); err != nil || len(got) != len(data) {
		t.Fatalf("pulled file %s: %d bytes, %v", snap, len(got), err)
	}
	poll(t, p, 15*time.Second, "the pulled model in /v1/models", func() (bool, string) {
		_, b, _ := p.get("/v1/models")
		return strings.Contains(string(b), `"org/Tiny-GGUF/tiny-F32"`), string(b)
	})
	code, _, ans := chat(t, p, `{"model":"org/Tiny-GGUF/tiny-F32","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0}`)
	if code != http.StatusOK || ans.Usage.CompletionTokens == 0 {
		t.Fatalf("chat with the pulled model: %d %+v", code, ans)
	}

	// From the registry, into Ollama's store.
	out, err = exec.Command(bin, "pull", "--api", "http://"+addr, "tiny:f32").CombinedOutput()
	host := strings.TrimPrefix(hub.URL(), "http://")
	if err != nil || !strings.Contains(string(out), "model "+host+"/library/tiny:f32 is in") {
		t.Fatalf("orrery pull tiny:f32: %v\n%s", err, out)
	}
	manifest := filepath.Join(home, ".ollama", "models", "manifests", host, "library", "tiny", "f32")
	if _, err := os.Stat(manifest); err != nil {
		t.Fatal(err)
	}
	poll(t, p, 15*time.Second, "the registry model in /v1/models", func() (bool, string) {
		_, b, _ := p.get("/v1/models")
		return strings.Contains(string(b), `"`+host+`/library/tiny:f32"`), string(b)
	})
	// Its params layer is the model's defaults, in the state.
	poll(t, p, 15*time.Second, "the registry model's params as its defaults", func() (bool, string) {
		_, b, _ := p.get("/state/nodeModels")
		return strings.Contains(string(b), `"id":"`+host+`/library/tiny:f32"`) && strings.Contains(string(b), `"defaults":{"temperature":0}`), string(b)
	})

	// kill -9 mid-pull, restart, pull again: it resumes.
	hub.SlowPerSec = int64(len(big)) / 12 // 4 chunks at once: about 3 s for the file
	d, err := p.api().Pull(context.Background(), "hf.co/org/Big-GGUF:Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	poll(t, p, 20*time.Second, "a third of the second pull in", func() (bool, string) {
		cur, err := p.api().Download(context.Background(), d.ID)
		return err == nil && cur.Bytes > int64(len(big))/3, cur.Status
	})
	p.cmd.Process.Kill()
	<-p.done
	servedBefore := hub.Served.Load()
	hub.SlowPerSec = 0
	p = startAgentEnv(t, bin, addr, dir, env, "--loopback-dir", t.TempDir(), "--registry", hub.URL(), "--download-idle-timeout", "2s")
	waitHealthy(t, p)
	d2, err := p.api().Pull(context.Background(), "hf.co/org/Big-GGUF:Q8_0")
	if err != nil {
		t.Fatal(err)
	}
	var done state.Download
	poll(t, p, 30*time.Second, "the resumed pull done", func() (bool, string) {
		done, err = p.api().Download(context.Background(), d2.ID)
		return err == nil && done.Status == state.DownloadDone, done.Status + " " + done.Error
	})
	again := hub.Served.Load() - servedBefore
	// Fetched twice at most: what each of the 4 chunks in flight had
	// received since its last saved MiB.
	waste := again + done.Resumed - int64(len(big))
	t.Logf("resume after kill -9: %d of %d bytes were in (resumed); the restart fetched %d (%d twice)", done.Resumed, len(big), again, waste)
	if done.Resumed == 0 || waste < 0 || waste > 4<<20 {
		t.Errorf("resumed %d bytes, fetched %d more of %d", done.Resumed, again, len(big))
	}
	// The CDN goes silent mid-chunk on one connection (socket open, no
	// FIN) and trickles a byte a second on another: orrery pull completes,
	// and the download's state counts the two stalls.
	other := append([]byte(nil), big...)
	other[len(other)-1] ^= 0xff // another file: another blob
	hub.Add("org/Stall-GGUF", "stall-Q8_0.gguf", other)
	hub.Stall(1<<20, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	start := time.Now()
	out, err = exec.CommandContext(ctx, bin, "pull", "--api", "http://"+addr, "hf.co/org/Stall-GGUF:Q8_0").CombinedOutput()
	cancel()
	if err != nil || !strings.Contains(string(out), "is in") {
		t.Fatalf("orrery pull through a stalling CDN: %v (after %v)\n%s", err, time.Since(start), out)
	}
	var dls map[string]state.Download
	p.mustGet(t, "/state/downloads", &dls)
	found := false
	for _, dl := range dls {
		if dl.Ref == "hf.co/org/Stall-GGUF:Q8_0" {
			found = true
			if dl.Status != state.DownloadDone || dl.Stalls != 2 || dl.Retries < 2 {
				t.Errorf("the stalled pull's download: %s, %d stalls, %d retries; want Done, 2, ≥ 2", dl.Status, dl.Stalls, dl.Retries)
			}
		}
	}
	if !found {
		t.Errorf("no download of the stalled pull in %v", dls)
	}
	t.Logf("orrery pull through a silent and a trickling CDN connection: done in %v", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(p.stderr.String(), "download stalled") {
		t.Errorf("the agent logged no stall:\n%s", p.stderr.String())
	}
	// A bad reference is refused with the reason.
	out, err = exec.Command(bin, "pull", "--api", "http://"+addr, "hf.co/../etc:Q4").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no '..'") {
		t.Errorf("bad reference: %v\n%s", err, out)
	}
	stop(t, p)
}
