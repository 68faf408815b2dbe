//go:build netns

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
)

// Request bounds: an operation that has not ended by then is hung.
const (
	chaosOpBound   = 60 * time.Second
	chaosMaxLive   = 4 // acknowledged instances kept at once
	chaosWorkers   = 2
	chaosCPUWindow = 10 * time.Second
)

// chaosWorkload is the client stream: placements, deletions, chats and
// traced ring benchmarks through random nodes, with what was acknowledged.
type chaosWorkload struct {
	nodes []*chaosNode
	seed  int64
	ctx   context.Context
	halt  context.CancelFunc
	wg    sync.WaitGroup

	mu         sync.Mutex
	ops        map[string]int // "place ok", "chat error", …
	placed     map[string]string
	deleted    map[string]bool
	seenFailed map[string]string // acknowledged instance → the error it was seen Failed with
	traces     []string
	hung       []string
	samples    map[string]string // an error of each "op result", for the figures
}

func newChaosWorkload(nodes []*chaosNode, seed int64) *chaosWorkload {
	ctx, halt := context.WithCancel(context.Background())
	return &chaosWorkload{nodes: nodes, seed: seed, ctx: ctx, halt: halt, ops: map[string]int{},
		placed: map[string]string{}, deleted: map[string]bool{}, seenFailed: map[string]string{}, samples: map[string]string{}}
}

func (w *chaosWorkload) start() {
	for i := range chaosWorkers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rng := rand.New(rand.NewSource(w.seed*100 + int64(i)))
			for w.ctx.Err() == nil {
				w.one(rng)
				time.Sleep(time.Duration(100+rng.Intn(400)) * time.Millisecond)
			}
		}()
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for w.ctx.Err() == nil {
			w.watch()
			time.Sleep(500 * time.Millisecond)
		}
	}()
}

// stop ends the stream and waits for the operations in flight (each is
// bounded).
func (w *chaosWorkload) stop() {
	w.halt()
	w.wg.Wait()
}

func (w *chaosWorkload) count(op string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	res := "ok"
	var ae *client.Error
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout"):
		res = "hung"
		w.hung = append(w.hung, op+": "+err.Error())
	case errors.As(err, &ae):
		res = fmt.Sprintf("refused %d", ae.Status)
	default:
		res = "error"
	}
	w.ops[op+" "+res]++
	if _, ok := w.samples[op+" "+res]; err != nil && !ok {
		msg := err.Error()
		if errors.As(err, &ae) {
			msg = ae.Message
		}
		w.samples[op+" "+res] = msg[:min(len(msg), 160)]
	}
}

// one runs one random operation through a random node.
func (w *chaosWorkload) one(rng *rand.Rand) {
	n := w.nodes[rng.Intn(len(w.nodes))]
	c := n.api(chaosOpBound)
	ctx, cancel := context.WithTimeout(context.Background(), chaosOpBound)
	defer cancel()
	w.mu.Lock()
	var live []string
	for id := range w.placed {
		if !w.deleted[id] {
			live = append(live, id)
		}
	}
	w.mu.Unlock()
	slices.Sort(live)
	switch r := rng.Intn(10); {
	case r < 3 && len(live) < chaosMaxLive:
		owner := w.nodes[rng.Intn(len(w.nodes))]
		req := api.PlaceRequest{Model: owner.model, Nodes: []string{owner.id}}
		if o := w.nodes[rng.Intn(len(w.nodes))]; o != owner {
			req.Nodes = append(req.Nodes, o.id)
		}
		resp, err := c.Place(ctx, req)
		w.count("place", err)
		if err == nil {
			w.mu.Lock()
			w.placed[resp.Instance.InstanceID] = resp.Instance.NodeID
			w.mu.Unlock()
		}
	case r < 5 && len(live) > 0:
		id := live[rng.Intn(len(live))]
		err := c.DeleteInstance(ctx, id)
		w.count("delete", err)
		// A 503 that says the deletion stands (no master answered in
		// time) is a deletion too: the owner's record has dropped the
		// instance, and the state follows when a master answers.
		var ae *client.Error
		if err == nil || errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable && strings.Contains(ae.Message, "the deletion stands") {
			w.mu.Lock()
			w.deleted[id] = true
			w.mu.Unlock()
		}
	case r < 9:
		model := w.nodes[rng.Intn(len(w.nodes))].model
		var hdr http.Header
		code, b, err := chaosPost(ctx, n, "/v1/chat/completions",
			`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0}`, &hdr)
		if err == nil && code != http.StatusOK {
			err = &client.Error{Method: "POST", URL: "/v1/chat/completions", Status: code, Message: string(b)}
		}
		w.count("chat", err)
		if id := hdr.Get(api.TraceIDHeader); err == nil && id != "" {
			w.mu.Lock()
			w.traces = append(w.traces, id)
			w.mu.Unlock()
		}
	default:
		res, err := c.RingBench(ctx, api.RingBenchRequest{SizeBytes: 1 << 20, Rounds: 2})
		w.count("ring-bench", err)
		if err == nil && res.TraceID != "" {
			w.mu.Lock()
			w.traces = append(w.traces, res.TraceID)
			w.mu.Unlock()
		}
	}
}

// chaosPost posts a JSON body inside n's namespace.
func chaosPost(ctx context.Context, n *chaosNode, path, body string, hdr *http.Header) (int, []byte, error) {
	c := n.api(chaosOpBound)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	*hdr = resp.Header
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// watch notes the acknowledged instances that any node shows Failed.
func (w *chaosWorkload) watch() {
	for _, n := range w.nodes {
		ctx, cancel := context.WithTimeout(w.ctx, time.Second)
		st, err := n.api(time.Second).State(ctx)
		cancel()
		if err != nil {
			continue
		}
		w.mu.Lock()
		for id := range w.placed {
			if in, ok := st.Instances[id]; ok && in.Status == state.InstanceStatusFailed {
				w.seenFailed[id] = in.Error
			}
		}
		w.mu.Unlock()
	}
}

// chaosCheck checks the invariants on the healed cluster and prints the
// figures.
func chaosCheck(t *testing.T, nodes []*chaosNode, w *chaosWorkload, ids map[string]string, faults map[string]int, conv []time.Duration, heals []chaosHeal) {
	defer chaosKeepLogs(t, nodes)
	final := chaosPoll(t, nodes, 30*time.Second, "final convergence", func() (bool, string) { return chaosConverged(nodes) })
	for _, n := range nodes {
		var id string
		if err := n.cur().getJSON("/node_id", &id); err != nil || id != ids[n.name] {
			t.Errorf("%s: node id %q after the run, was %q (%v)", n.name, id, ids[n.name], err)
		}
	}
	st, err := nodes[0].api(5 * time.Second).State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A failure the state showed too briefly for the watch (the owner
	// replaced the instance within its poll) is in the owner's log, with
	// its reason.
	for id, why := range chaosLoggedFailures(nodes) {
		w.mu.Lock()
		if _, ok := w.placed[id]; ok && w.seenFailed[id] == "" {
			w.seenFailed[id] = why
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	var lost, resurrected, failed []string
	for id, owner := range w.placed {
		in, ok := st.Instances[id]
		switch {
		case w.deleted[id] && ok:
			resurrected = append(resurrected, id)
		case w.deleted[id]:
		case !ok && w.seenFailed[id] == "":
			lost = append(lost, fmt.Sprintf("%s (owner %.8s)", id, owner))
		case !ok || in.Status == state.InstanceStatusFailed:
			failed = append(failed, id)
		}
	}
	placed, deleted, traces, hung := len(w.placed), len(w.deleted), slices.Clone(w.traces), slices.Clone(w.hung)
	ops, samples := maps.Clone(w.ops), maps.Clone(w.samples)
	w.mu.Unlock()

	orphans, phantoms := chaosRunners(t, nodes)
	restarts, healRestarts := chaosRestarts(nodes, heals)
	missing := chaosTraces(t, nodes, traces)
	cpu := chaosCPU(nodes)

	sort.Slice(conv, func(i, j int) bool { return conv[i] < conv[j] })
	pct := func(p float64) time.Duration {
		if len(conv) == 0 {
			return 0
		}
		return conv[min(len(conv)-1, int(p*float64(len(conv))))].Round(time.Millisecond)
	}
	var f strings.Builder
	fmt.Fprintf(&f, "faults injected: %d %v\n", sumCounts(faults), faults)
	fmt.Fprintf(&f, "operations: %d %v\n", sumCounts(ops), ops)
	for _, k := range slices.Sorted(maps.Keys(samples)) {
		fmt.Fprintf(&f, "  e.g. %s: %s\n", k, samples[k])
	}
	fmt.Fprintf(&f, "acknowledged placements %d, deletions %d; lost acknowledged writes %d (placements lost %d, deletions undone %d); placements failed with a reason %d\n",
		placed, deleted, len(lost)+len(resurrected), len(lost), len(resurrected), len(failed))
	fmt.Fprintf(&f, "orphan runner processes %d, runners in the state without a process %d\n", len(orphans), len(phantoms))
	fmt.Fprintf(&f, "runner restarts (a runner shut down, then started again for the same instance and rank) %d; caused by a heal %d %v\n", restarts, len(healRestarts), healRestarts)
	fmt.Fprintf(&f, "hung requests %d (bound %v)\n", len(hung), chaosOpBound)
	fmt.Fprintf(&f, "convergence after a heal: p50 %v, p99 %v, max %v over %d heals; final %v\n", pct(0.5), pct(0.99), pct(1), len(conv), final.Round(time.Millisecond))
	fmt.Fprintf(&f, "traces: %d asked, %d missing\n", len(traces), len(missing))
	fmt.Fprintf(&f, "agent CPU over %v after the end: %s\n", chaosCPUWindow, cpu.text)
	t.Logf("chaos figures:\n%s", f.String())
	if len(lost)+len(resurrected) > 0 {
		t.Errorf("lost acknowledged writes: placements %v, deletions undone %v", lost, resurrected)
	}
	if len(orphans)+len(phantoms) > 0 {
		t.Errorf("runners: orphan processes %v, state runners without a process %v", orphans, phantoms)
	}
	if len(healRestarts) > 0 {
		t.Errorf("runners restarted because of a heal (a model reloaded for nothing): %v", healRestarts)
	}
	if len(hung) > 0 {
		t.Errorf("hung requests: %v", hung)
	}
	if m := pct(1); m > 5*time.Second {
		t.Errorf("a heal took %v to converge, over 5 s", m)
	}
	if len(missing) > 0 {
		t.Errorf("traces missing: %v", missing)
	}
	if cpu.over != "" {
		t.Errorf("agent CPU after the faults: %s", cpu.over)
	}
}

// chaosKeepLogs writes every agent process's whole log, when the test
// failed, to a directory it names (the test's own output keeps only the
// ends of the last ones).
func chaosKeepLogs(t *testing.T, nodes []*chaosNode) {
	if !t.Failed() {
		return
	}
	dir, err := os.MkdirTemp("", "orrery-chaos-logs-")
	if err != nil {
		t.Logf("keep the agents' logs: %v", err)
		return
	}
	for _, n := range nodes {
		n.mu.Lock()
		agents := slices.Clone(n.all)
		n.mu.Unlock()
		for i, a := range agents {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d.log", n.name, i)), []byte(a.stderr.String()), 0o600)
		}
	}
	t.Logf("every agent's log is in %s", dir)
}

// chaosFailLine reads a log line saying an instance failed, or that a node
// replaced one that had.
var chaosFailLine = regexp.MustCompile(`msg="(?:instance failed|restored instance failed|replacing failed instance)".* instance=(\S+) .*?\berr(?:or)?=(.*)$`)

// chaosLoggedFailures are the instances their owners logged as Failed
// (publishing InstanceFailed), with the reason, from every agent's log;
// and those a node replaced on demand, failed by the state itself (a
// rank's node left the cluster: no owner logs that), with their error.
func chaosLoggedFailures(nodes []*chaosNode) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		n.mu.Lock()
		agents := slices.Clone(n.all)
		n.mu.Unlock()
		for _, a := range agents {
			for line := range strings.Lines(a.stderr.String()) {
				if m := chaosFailLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
					out[m[1]] = m[2]
				}
			}
		}
	}
	return out
}

// chaosLogLine reads an agent's log line about a runner: its time, what
// happened and the runner id.
var chaosLogLine = regexp.MustCompile(`^time=(\S+) .*msg="runner (started|shut down|failed)".* runner=(\S+)`)

// chaosRunnerEvent is a runner's start, stop or failure, from a log.
type chaosRunnerEvent struct {
	node, runner, what string
	at                 time.Time
}

// chaosInstanceOf is a runner id's instance: the id without "-rank".
func chaosInstanceOf(runner string) string {
	if i := strings.LastIndexByte(runner, '-'); i > 0 {
		return runner[:i]
	}
	return runner
}

// chaosRestarts reads every agent process's log: a runner that shut down
// and was started again on the same node (same instance and rank) was
// restarted; one whose shutdown fell in a heal's window was restarted
// because of the heal, unless its instance had already lost a runner
// during the fault: then the fault stopped the instance (a rank's node
// gone for longer than fail-after), and a node that could not act during
// it (stopped, cut off) stops its own rank only once it is back.
func chaosRestarts(nodes []*chaosNode, heals []chaosHeal) (restarts int, byHeal []string) {
	var evs []chaosRunnerEvent
	for _, n := range nodes {
		n.mu.Lock()
		agents := slices.Clone(n.all)
		n.mu.Unlock()
		for _, a := range agents {
			for line := range strings.Lines(a.stderr.String()) {
				m := chaosLogLine.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				at, err := time.Parse(time.RFC3339Nano, m[1])
				if err != nil {
					continue
				}
				evs = append(evs, chaosRunnerEvent{node: n.name, runner: m[3], what: m[2], at: at})
			}
		}
	}
	// lostDuring reports whether instance inst lost a runner (anywhere)
	// during heal h's fault.
	lostDuring := func(inst string, h chaosHeal) bool {
		for _, e := range evs {
			if e.what != "started" && chaosInstanceOf(e.runner) == inst && !e.at.Before(h.fault) && e.at.Before(h.from) {
				return true
			}
		}
		return false
	}
	down := map[[2]string]time.Time{} // node, runner → when it last shut down
	for _, e := range evs {           // in each node's log order
		k := [2]string{e.node, e.runner}
		switch e.what {
		case "shut down":
			down[k] = e.at
		case "started":
			stopped, ok := down[k]
			if !ok {
				continue
			}
			delete(down, k)
			restarts++
			for _, h := range heals {
				if !stopped.Before(h.from) && !stopped.After(h.to) {
					if !lostDuring(chaosInstanceOf(e.runner), h) {
						byHeal = append(byHeal, fmt.Sprintf("%s on %s (heal of %s of %s)", e.runner, e.node, h.kind, h.victim))
					}
					break
				}
			}
		}
	}
	return restarts, byHeal
}

func sumCounts(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

func mapsValues(m map[string]string) []string { return slices.Sorted(maps.Values(m)) }

// chaosRunners waits (30 s at most) for the runner processes of every node
// to match the runners its state shows, and returns what still differs.
func chaosRunners(t *testing.T, nodes []*chaosNode) (orphans, phantoms []string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		orphans, phantoms = nil, nil
		st, err := nodes[0].api(5 * time.Second).State(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			procs := runnerPids(n.cur().cmd.Process.Pid)
			known := map[int]bool{}
			for _, r := range st.Runners {
				in, ok := st.Instances[r.InstanceID]
				if r.NodeID != n.id || !ok || in.Status == state.InstanceStatusFailed || r.Pid == 0 {
					continue
				}
				known[r.Pid] = true
				if (r.Status == state.RunnerReady || r.Status == state.RunnerRunning) && !slices.Contains(procs, r.Pid) {
					phantoms = append(phantoms, fmt.Sprintf("%s (pid %d on %s)", r.RunnerID, r.Pid, n.name))
				}
			}
			for _, p := range procs {
				if !known[p] {
					orphans = append(orphans, fmt.Sprintf("pid %d on %s", p, n.name))
				}
			}
		}
		if len(orphans)+len(phantoms) == 0 || time.Now().After(deadline) {
			return orphans, phantoms
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// chaosTraces waits (20 s at most) for every trace id to have a trace file
// on some node, and returns those that do not.
func chaosTraces(t *testing.T, nodes []*chaosNode, ids []string) []string {
	deadline := time.Now().Add(20 * time.Second)
	for {
		var missing []string
		for _, id := range ids {
			found := false
			for _, n := range nodes {
				if _, err := os.Stat(filepath.Join(n.dir, "traces", id+".json")); err == nil {
					found = true
				}
			}
			if !found {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type chaosCPUResult struct{ text, over string }

// chaosCPU measures each agent's CPU time over chaosCPUWindow.
func chaosCPU(nodes []*chaosNode) chaosCPUResult {
	before := make([]float64, len(nodes))
	for i, n := range nodes {
		before[i] = cpuSeconds(n.cur().cmd.Process.Pid)
	}
	time.Sleep(chaosCPUWindow)
	var r chaosCPUResult
	for i, n := range nodes {
		pct := 100 * (cpuSeconds(n.cur().cmd.Process.Pid) - before[i]) / chaosCPUWindow.Seconds()
		r.text += fmt.Sprintf("%s %.1f %% ", n.name, pct)
		if pct > 5 {
			r.over += fmt.Sprintf("%s %.1f %% of a core; ", n.name, pct)
		}
	}
	return r
}

// cpuSeconds is a process's user+system CPU time (clock ticks of 1/100 s,
// as Linux reports them to user space).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	var utime, stime float64
	if len(f) > 12 {
		fmt.Sscan(f[11], &utime)
		fmt.Sscan(f[12], &stime)
	}
	return (utime + stime) / 100
}
