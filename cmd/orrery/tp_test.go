package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/sample"
	"github.com/orrery-cluster/orrery/engine/split"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// tpRunner is one runner process of TestTensorParallelRunners.
type tpRunner struct {
	cmd    *exec.Cmd
	client *runnerapi.Client
	stderr *testutil.SyncBuffer
	exited chan struct{}
}

func startTPRunner(t *testing.T, bin, path string, extra ...string) *tpRunner {
	t.Helper()
	args := append([]string{"runner", "--model", path, "--threads", "1", "--kv-type", "f32", "--parallel", "2", "--ctx", "256"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), runnerapi.TokenEnv+"=rt", runnerapi.GroupTokenEnv+"=group-secret")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &tpRunner{cmd: cmd, stderr: &testutil.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(r.exited) }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-r.exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-r.exited
		}
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), runnerapi.ListenPrefix); ok {
			go sc.Scan() // drain
			r.client = &runnerapi.Client{Addr: addr, Token: "rt"}
			return r
		}
	}
	t.Fatalf("runner exited before announcing its address: %s", r.stderr.String())
	return nil
}

func (r *tpRunner) ready(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, "runner ready", func() bool {
		h, err := r.client.Health(context.Background())
		if err == nil && h.Status == runnerapi.StatusFailed {
			t.Fatalf("runner failed: %s", h.Error)
		}
		return err == nil && h.Status == runnerapi.StatusReady
	})
}

// greedy runs two greedy completions at once (continuous batching) and
// returns their tokens.
func greedy(t *testing.T, c *runnerapi.Client) [2][]int32 {
	t.Helper()
	var out [2][]int32
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			req := runnerapi.CompletionRequest{Request: runnerapi.Request{PromptTokens: []int32{1, int32(40 + 7*i), 300, 17, int32(99 + i)},
				MaxTokens: 24, IgnoreEOS: true, Sample: sample.Options{Temperature: 0}}}
			_, errs[i] = c.Complete(context.Background(), req, func(p runnerapi.Piece) error {
				if p.Token >= 0 {
					out[i] = append(out[i], p.Token)
				}
				return nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("completion %d: %v", i, err)
		}
	}
	return out
}

// Two runner processes, each with its slice of a model, serve completions
// through rank 0 as one tensor-parallel group: two greedy completions at
// once give the tokens one runner with the whole model gives. A killed
// rank then ends rank 0 too, with an error naming the rank.
func TestTensorParallelRunners(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	o := model.Presets["tiny"]
	o.Heads, o.KVHeads, o.Seed = 8, 4, 5
	if err := model.Generate(path, o); err != nil {
		t.Fatal(err)
	}
	single := startTPRunner(t, bin, path)
	single.ready(t)
	want := greedy(t, single.client)
	for i, w := range want {
		if len(w) != 24 {
			t.Fatalf("completion %d: %d tokens, want 24", i, len(w))
		}
	}

	const ranks = 2
	var slicesPaths []string
	plan := tpPlan(t, path, ranks)
	for _, s := range plan {
		p := filepath.Join(dir, fmt.Sprintf("tp%d.gguf", s.Rank))
		if err := split.WriteTPSlice(path, p, 0, o.Layers, s, "test"); err != nil {
			t.Fatal(err)
		}
		slicesPaths = append(slicesPaths, p)
	}
	addrs := []string{testutil.FreeAddr(t), testutil.FreeAddr(t)}
	var group []*tpRunner
	for r, p := range slicesPaths {
		group = append(group, startTPRunner(t, bin, p, "--tp-rank", fmt.Sprint(r), "--tp-ranks", fmt.Sprint(ranks), "--tp-addrs", strings.Join(addrs, ",")))
	}
	group[0].ready(t)
	got := greedy(t, group[0].client)
	for i := range got {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("completion %d: tensor-parallel tokens %v, one runner's %v", i, got[i], want[i])
		}
	}

	// A traced request records each all-reduce as a span with its bytes:
	// 2 per block (4 blocks) per forward pass, each of one row per token.
	req := runnerapi.CompletionRequest{TraceID: "tp-trace", Request: runnerapi.Request{PromptTokens: []int32{1, 2, 3, 4, 5}, MaxTokens: 4, IgnoreEOS: true}}
	done, err := group[0].client.Complete(context.Background(), req, func(runnerapi.Piece) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var reduces, compute int
	for _, sp := range done.Spans {
		switch {
		case sp.Name == "all-reduce":
			reduces++
			// A block's rows of the hidden state, or the head's logits
			// gathered (its rows split by vocabulary).
			if (sp.Args.Bytes%(int64(o.Dim)*4) != 0 && sp.Args.Bytes%(int64(o.Vocab)*4) != 0) || sp.Args.Bytes == 0 || !strings.HasSuffix(sp.Cat, "/comms") {
				t.Errorf("all-reduce span %+v: want a whole number of %d-value rows or %d-value logits, in comms", sp, o.Dim, o.Vocab)
			}
		case sp.Name == "compute":
			compute++
		}
	}
	if compute == 0 || reduces != (2*o.Layers+1)*compute {
		t.Errorf("%d all-reduce spans over %d forward passes of %d blocks, want 2 per block and the logits' gather", reduces, compute, o.Layers)
	}
	// And the bytes rank 0 has sent on its link to rank 1, sampled from
	// the request's start to its end (the agent's link track): growing by
	// at least the all-reduces' bytes.
	var link []float64
	for _, c := range done.Counters {
		if c.Name == runnerapi.LinkCounter(1) {
			link = append(link, c.Value)
		}
	}
	var reduced float64
	for _, sp := range done.Spans {
		if sp.Name == "all-reduce" {
			reduced += float64(sp.Args.Bytes)
		}
	}
	if len(link) < 2 || !slices.IsSorted(link) || link[len(link)-1]-link[0] < reduced {
		t.Errorf("rank 0's samples of its link to rank 1: %v, want ≥ 2, growing by ≥ the all-reduces' %v bytes", link, reduced)
	}

	killed := time.Now()
	group[1].cmd.Process.Signal(syscall.SIGKILL)
	// Rank 0 notices at its next step, and fails the request.
	failed := make(chan error, 1)
	go func() {
		_, err := group[0].client.Complete(context.Background(), runnerapi.CompletionRequest{Request: runnerapi.Request{PromptTokens: []int32{1, 2, 3},
			MaxTokens: 8, IgnoreEOS: true}}, func(runnerapi.Piece) error { return nil })
		failed <- err
	}()
	select {
	case <-group[0].exited:
		t.Logf("rank 0 exited %v after rank 1 was killed", time.Since(killed).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("rank 0 still runs 10 s after rank 1 was killed")
	}
	if err := <-failed; err == nil {
		t.Error("a completion succeeded with rank 1 dead")
	}
	if s := group[0].stderr.String(); !strings.Contains(s, "rank 1") {
		t.Errorf("rank 0's log does not name rank 1:\n%s", s)
	}
}

func tpPlan(t *testing.T, path string, ranks int) []model.TPSlice {
	t.Helper()
	plan, err := split.PlanTPFile(path, ranks)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// A mixture of experts split by experts over three runner processes (its
// 8 experts 3/3/2, the router whole on each; deepseek2's latent attention
// and glm4moe's partial-rotary attention by heads, their dense block and
// shared expert by columns): continuous
// batching gives the tokens of one runner with the whole model.
func TestExpertParallelRunners(t *testing.T) {
	bin := buildBinary(t)
	for _, fam := range []string{"qwen3moe", "deepseek2", "glm4moe"} {
		t.Run(fam, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "moe.gguf")
			o := model.Presets["tiny"]
			o.Heads, o.KVHeads, o.Seed = 8, 4, 5
			o, err := model.ApplyFamily(o, fam)
			if err != nil {
				t.Fatal(err)
			}
			if err := model.Generate(path, o); err != nil {
				t.Fatal(err)
			}
			single := startTPRunner(t, bin, path)
			single.ready(t)
			want := greedy(t, single.client)

			const ranks = 3
			addrs := []string{testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)}
			var group []*tpRunner
			for _, s := range tpPlan(t, path, ranks) {
				if s.FullExperts != 8 || s.Experts < 2 || s.Experts > 3 {
					t.Fatalf("rank %d holds %d of %d experts, want 2 or 3 of 8", s.Rank, s.Experts, s.FullExperts)
				}
				p := filepath.Join(dir, fmt.Sprintf("ep%d.gguf", s.Rank))
				if err := split.WriteTPSlice(path, p, 0, o.Layers, s, "test"); err != nil {
					t.Fatal(err)
				}
				group = append(group, startTPRunner(t, bin, p, "--tp-rank", fmt.Sprint(s.Rank), "--tp-ranks", fmt.Sprint(ranks), "--tp-addrs", strings.Join(addrs, ",")))
			}
			group[0].ready(t)
			got := greedy(t, group[0].client)
			for i := range got {
				if len(want[i]) != 24 || !slices.Equal(got[i], want[i]) {
					t.Errorf("completion %d: expert-parallel tokens %v, one runner's %v", i, got[i], want[i])
				}
			}
		})
	}
}
