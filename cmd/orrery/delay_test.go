package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/internal/delayproxy"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// delayedPair starts two agents that reach each other only through delay
// proxies, one per direction, each adding delay each way. A proxy dials
// its upstream from another loopback address (127.0.0.3 or .4), so the
// address a node learns from an inbound link leads nowhere: every link,
// rank links included, goes through a proxy.
func delayedPair(t *testing.T, bin string, delay time.Duration, extra ...string) (a, b *agentProc, toB, toA *delayproxy.Proxy) {
	t.Helper()
	peerA, peerB := testutil.FreeAddr(t), testutil.FreeAddr(t)
	proxy := func(upstream, from string) *delayproxy.Proxy {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
		p := delayproxy.New(ln, delay, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", upstream) })
		t.Cleanup(func() { p.Close() })
		return p
	}
	toB, toA = proxy(peerB, "127.0.0.3"), proxy(peerA, "127.0.0.4")
	env := []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()}
	dirA, dirB := t.TempDir(), t.TempDir()
	if src := os.Getenv("ORRERY_DELAY_TEST_MODEL"); src != "" {
		// A measurement knob: the figures for a bigger model (e.g. the
		// 1b preset) without generating it in the test.
		os.MkdirAll(filepath.Join(dirA, "models"), 0o700)
		if err := os.Symlink(src, filepath.Join(dirA, "models", "delay-test.gguf")); err != nil {
			t.Fatal(err)
		}
	} else {
		genModel(t, bin, dirA, "delay-test", "--preset", "small")
	}
	args := func(peerAddr, peer string) []string {
		return append([]string{"--peer-addr", peerAddr, "--peer", peer, "--trace-merge-timeout", "2s"}, extra...)
	}
	a = startAgentEnv(t, bin, testutil.FreeAddr(t), dirA, append(env, "HOME="+dirA), args(peerA, toB.Addr().String())...)
	b = startAgentEnv(t, bin, testutil.FreeAddr(t), dirB, append(env, "HOME="+dirB), args(peerB, toA.Addr().String())...)
	waitHealthy(t, a)
	waitHealthy(t, b)
	ps := []*agentProc{a, b}
	pollAll(t, ps, 20*time.Second, "one master and 2 members", func() (bool, string) { return agreed(t, ps, 2) })
	return a, b, toB, toA
}

// Two ranks on two agents with 1 ms added each way between them (and,
// for comparison, none): decode works through the proxies, and the test
// reports decode tok/s, the time each token gains and the bytes each
// token moves on each link.
func TestPipelineDelay(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (two agents through delay proxies): runs in make test")
	}
	bin := buildBinary(t)
	results := map[time.Duration]float64{}
	for _, delay := range []time.Duration{0, time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			threads := "1"
			if v := os.Getenv("ORRERY_DELAY_TEST_THREADS"); v != "" {
				threads = v // with ORRERY_DELAY_TEST_MODEL, for the figures
			}
			a, b, toB, toA := delayedPair(t, bin, delay, "--runner-threads", threads)
			var ida, idb string
			a.mustGet(t, "/node_id", &ida)
			b.mustGet(t, "/node_id", &idb)
			poll(t, b, 20*time.Second, "A's model in B's /v1/models, both identities on A", func() (bool, string) {
				_, body, _ := b.get("/v1/models")
				return strings.Contains(string(body), ida) && len(identities(t, a)) == 2, string(body)
			})
			in := placeJSON(t, b, fmt.Sprintf(`{"model":"delay-test","nodes":["%s","%s"]}`, ida, idb))
			waitReadyRanks(t, a, in)
			req := `{"model":"delay-test","messages":[{"role":"user","content":"hi"}],"max_tokens":129,"temperature":0,"ignore_eos":true}`
			chat(t, a, req) // warm up
			upB, downB := toB.Forwarded()
			upA, downA := toA.Forwarded()
			var best float64
			for range 3 {
				code, _, ans := chat(t, a, req)
				if code != http.StatusOK || ans.Usage.CompletionTokens != 129 {
					t.Fatalf("chat: %d %+v", code, ans)
				}
				best = max(best, ans.orreryDecode())
			}
			upB2, downB2 := toB.Forwarded()
			upA2, downA2 := toA.Forwarded()
			tokens := 3 * 129.0
			ab, ba := float64(upB2-upB+downA2-downA), float64(upA2-upA+downB2-downB)
			if ab == 0 || ba == 0 {
				t.Fatalf("no traffic through the proxies: A→B %v, B→A %v bytes", ab, ba)
			}
			results[delay] = best
			t.Logf("delay %v each way: decode %.1f tok/s (best of 3 × 128 tokens); per token A→B %.0f bytes, B→A %.0f bytes (all links, prompt included)",
				delay, best, ab/tokens, ba/tokens)
			specRun(t, a, req, delay, best)
			concurrentThroughput(t, a, delay)
		})
	}
	if d0, d1 := results[0], results[time.Millisecond]; d0 > 0 && d1 > 0 {
		t.Logf("1 ms each way: decode %.1f → %.1f tok/s; each token took %.2f ms longer (one round trip per token = 2 ms)",
			d0, d1, 1000/d1-1000/d0)
	}
}

// specRun decodes req again with prompt-lookup speculation through the
// pipeline (the last rank verifies, every rank rolls back), and logs its
// speed against plain decode's: the wait on the link is paid once per
// step, not once per token.
func specRun(t *testing.T, a *agentProc, req string, delay time.Duration, plain float64) {
	t.Helper()
	spec := strings.Replace(req, `"ignore_eos":true`, `"ignore_eos":true,"speculative":{"draft":"ngram","max":8}`, 1)
	var best float64
	var ans chatAnswer
	for range 3 {
		var code int
		code, _, ans = chat(t, a, spec)
		if code != http.StatusOK || ans.Usage.CompletionTokens != 129 || ans.Orrery.AcceptedDraftTokens > ans.Orrery.DraftTokens {
			t.Fatalf("speculative chat: %d %+v", code, ans)
		}
		best = max(best, ans.orreryDecode())
	}
	t.Logf("delay %v each way, prompt lookup (max 8): decode %.1f tok/s (best of 3), %.2f× plain; last run %d drafted, %d accepted",
		delay, best, best/plain, ans.Orrery.DraftTokens, ans.Orrery.AcceptedDraftTokens)
}

// concurrentThroughput sends 1, 2 and 4 chats at once (the instance has 4
// slots): through the pipeline their steps are in flight on both ranks at
// once, so the link's round trips overlap. It logs the aggregate tok/s.
func concurrentThroughput(t *testing.T, a *agentProc, delay time.Duration) {
	t.Helper()
	const n = 64
	base := 0.0
	for _, c := range []int{1, 2, 4} {
		start := time.Now()
		errs := make(chan error, c)
		for i := range c {
			go func() {
				req := fmt.Sprintf(`{"model":"delay-test","messages":[{"role":"user","content":"hi %d"}],"max_tokens":%d,"temperature":0,"ignore_eos":true}`, i, n)
				code, _, ans := chat(t, a, req)
				if code != http.StatusOK || ans.Usage.CompletionTokens != n {
					errs <- fmt.Errorf("chat %d of %d: %d %+v", i, c, code, ans.Error)
					return
				}
				errs <- nil
			}()
		}
		for range c {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		agg := float64(c*n) / time.Since(start).Seconds()
		if c == 1 {
			base = agg
		}
		t.Logf("delay %v each way, %d chats at once: %.1f tok/s aggregate (%.2f× one), %d tokens each, prefill included", delay, c, agg, agg/base, n)
	}
}
