package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/ident"
	"github.com/orrery-cluster/orrery/internal/testutil"

	"github.com/orrery-cluster/orrery/agent/api/client"
)

func TestDemoFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--nodes", "0"}, "--nodes 0: want 1..16"},
		{[]string{"demo", "--nodes", "17"}, "--nodes 17: want 1..16"},
		{[]string{"demo", "--base-port", "65534"}, "--base-port 65534: want 1..65533 for 3 nodes"},
		{[]string{"demo", "--base-port", "0"}, "--base-port 0"},
		{[]string{"demo", "--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"demo", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"demo", "extra"}, `unexpected argument "extra"`},
		{[]string{"demo", "--model", "nowhere.gguf"}, `model "nowhere.gguf": want a .gguf file`},
		{[]string{"demo", "--model", "", "--draft", "demo_test.go"}, `model "demo_test.go": want a .gguf file`},
		{[]string{"demo", "--model", "", "--draft", "../../models/kjv/kjv-draft-f16.gguf"}, "--draft needs --model"},
	} {
		code, out, errs := runCLI(tc.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
	code, _, errs := runCLI("demo", "-h")
	for _, w := range []string{"-nodes", "-base-port", "-dir", "-log-level"} {
		if code != 0 || !strings.Contains(errs, w) {
			t.Errorf("demo -h: exit %d, stderr lacks %q:\n%s", code, w, errs)
		}
	}
}

// demoProc is a running "orrery demo" whose stdout lines are collected.
type demoProc struct {
	cmd    *exec.Cmd
	lines  chan string // stdout, line by line; closed at EOF
	stderr *syncBuffer
	done   chan struct{}
	seen   []string // stdout lines lineAfter read
}

func startDemo(t *testing.T, bin string, args ...string) *demoProc {
	t.Helper()
	d := &demoProc{cmd: exec.Command(bin, append([]string{"demo"}, args...)...), lines: make(chan string, 100),
		stderr: &syncBuffer{}, done: make(chan struct{})}
	d.cmd.Stderr = d.stderr
	// Its own process group, as a shell gives a command: the agents and
	// their runners join it, and interruptGroup signals them all at once,
	// as Ctrl-C in a terminal does.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start demo: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
		io.Copy(io.Discard, out)
	}()
	go func() {
		d.cmd.Wait()
		close(d.done)
	}()
	// If the test fails early, stop the demo the way a user would, so
	// that it stops its agents; kill it only if that does not work.
	t.Cleanup(func() {
		select {
		case <-d.done:
			return
		default:
		}
		d.cmd.Process.Signal(os.Interrupt)
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

type demoRow struct{ idx, id, url, role string }

// table reads stdout until the demo has printed its table and the line
// after it, for at most 30 s.
func (d *demoProc) table(t *testing.T) (rows []demoRow, text string) {
	t.Helper()
	var all []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				<-d.done
				t.Fatalf("demo exited (%v) before printing its table\nstdout:\n%s\nstderr:\n%s",
					d.cmd.ProcessState, strings.Join(all, "\n"), d.stderr.String())
			}
			all = append(all, l)
			if f := strings.Fields(l); len(f) == 4 && strings.HasPrefix(f[2], "http://127.0.0.1:") {
				rows = append(rows, demoRow{f[0], f[1], f[2], f[3]})
			}
			if strings.Contains(l, "/state/topology") {
				return rows, strings.Join(all, "\n")
			}
		case <-timeout:
			t.Fatalf("no table within 30 s\nstdout:\n%s\nstderr:\n%s", strings.Join(all, "\n"), d.stderr.String())
		}
	}
}

// traceLine reads stdout until the demo says which trace it left, for at
// most 40 s, and returns the trace id.
func (d *demoProc) traceLine(t *testing.T) string {
	t.Helper()
	return d.lineAfter(t, "A ring benchmark left trace ")
}

// lineAfter waits (40 s) for a stdout line starting with prefix and
// returns its first word after it; seen gets the lines before it.
func (d *demoProc) lineAfter(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(40 * time.Second)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				t.Fatalf("demo stdout ended before a line %q\nstderr:\n%s", prefix, d.stderr.String())
			}
			d.seen = append(d.seen, l)
			if rest, found := strings.CutPrefix(l, prefix); found {
				return strings.Fields(rest)[0]
			}
		case <-timeout:
			t.Fatalf("no line %q within 40 s\nstderr:\n%s", prefix, d.stderr.String())
		}
	}
}

// stop sends sig and checks the demo exits 0 within 15 s.
func (d *demoProc) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("demo still running 15 s after %v\nstderr:\n%s", sig, d.stderr.String())
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("demo exited %d after %v, want 0\nstderr:\n%s", code, sig, d.stderr.String())
	}
}

// interruptGroup sends SIGINT to the demo's whole process group, as
// Ctrl-C in a terminal does (the demo, its agents and their runners all
// get it), and returns how long it took until no process of the group was
// left, for at most 15 s. The demo must exit 0.
func (d *demoProc) interruptGroup(t *testing.T) time.Duration {
	t.Helper()
	pgid := d.cmd.Process.Pid
	start := time.Now()
	if err := syscall.Kill(-pgid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var took time.Duration
	ok := testutil.Eventually(15*time.Second, func() bool {
		// The demo reaps its agents, and the test reaps the demo; a
		// runner whose agent died is reparented and reaped by init.
		select {
		case <-d.done:
		default:
			return false
		}
		err := syscall.Kill(-pgid, 0)
		took = time.Since(start)
		return errors.Is(err, syscall.ESRCH)
	})
	if !ok {
		out, _ := exec.Command("ps", "-o", "pid,stat,etime,args", "-g", strconv.Itoa(pgid)).CombinedOutput()
		t.Fatalf("processes of the demo's group still there 15 s after Ctrl-C:\n%s\nstderr:\n%s", out, d.stderr.String())
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("demo exited %d after Ctrl-C, want 0\nstderr:\n%s", code, d.stderr.String())
	}
	return took
}

// TestDemoProcess runs "orrery demo" as a user would: three agent
// processes form one cluster, and Ctrl-C stops them all.
func TestDemoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (orrery demo's three agents): runs in make test")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	base := testutil.FreeBasePort(t, 3)
	d := startDemo(t, bin, "--nodes", "3", "--base-port", strconv.Itoa(base), "--dir", dir)
	rows, text := d.table(t)
	t.Logf("demo printed:\n%s", text)
	if len(rows) != 3 {
		t.Fatalf("%d table rows, want 3:\n%s", len(rows), text)
	}
	// The demo leaves a ring-benchmark trace on the master.
	traceID := d.traceLine(t)
	var list struct {
		Traces []struct {
			TaskID string `json:"taskId"`
			Nodes  int    `json:"nodes"`
		} `json:"traces"`
	}
	masterURL := ""
	for _, r := range rows {
		if r.role == "master" {
			masterURL = r.url
		}
	}
	if code, b, err := (&agentProc{addr: strings.TrimPrefix(masterURL, "http://")}).get("/v1/traces"); err != nil || code != 200 || json.Unmarshal(b, &list) != nil {
		t.Fatalf("GET /v1/traces on the master (%s): %d %s %v", masterURL, code, b, err)
	}
	ringListed := false
	for _, tr := range list.Traces {
		ringListed = ringListed || tr.TaskID == traceID && tr.Nodes == 3
	}
	if !ringListed {
		t.Errorf("the master lists %+v, want the demo's trace %s over 3 nodes", list.Traces, traceID)
	}
	// Then the chat: a model placed on node 2, a completion streamed
	// through node 0 with its speed, and its trace on the master.
	chatTrace := d.lineAfter(t, "The chat left trace ")
	out := strings.Join(d.seen, "\n")
	if !strings.Contains(out, "Chat with orrery-demo-small split over 3 nodes (rank 0: node 0, layers 0-") || !strings.Contains(out, "asked through node 0") || !regexp.MustCompile(`\d+ tokens in [0-9.]+ s .*decode [0-9.]+ tok/s, first token after \d+ ms`).MatchString(out) {
		t.Errorf("chat output:\n%s", out)
	}
	m := &agentProc{addr: strings.TrimPrefix(masterURL, "http://")}
	poll(t, m, 10*time.Second, "the chat trace on the master", func() (bool, string) {
		code, b, _ := m.get("/v1/traces/" + chatTrace + "/stats")
		return code == 200 && strings.Contains(string(b), "decode/compute") && strings.Contains(string(b), `"2":`), string(b)
	})
	ids := map[string]bool{}
	master := ""
	for i, r := range rows {
		if err := ident.ValidNodeID(r.id); err != nil || ids[r.id] {
			t.Errorf("row %d: node id %q: %v (or a duplicate)", i, r.id, err)
		}
		ids[r.id] = true
		if want := fmt.Sprintf("http://127.0.0.1:%d", base+i); r.idx != strconv.Itoa(i) || r.url != want {
			t.Errorf("row %d: index %s, url %s; want %d, %s", i, r.idx, r.url, i, want)
		}
		switch r.role {
		case "master":
			if master != "" {
				t.Errorf("two masters: %s and %s", master, r.id)
			}
			master = r.id
		case "worker":
		default:
			t.Errorf("row %d: role %q", i, r.role)
		}
	}
	if master == "" {
		t.Errorf("no master in the table:\n%s", text)
	}
	for _, w := range []string{"curl " + rows[0].url + "/state/topology", rows[0].url + "/cluster"} {
		if !strings.Contains(text, w) {
			t.Errorf("output lacks %q", w)
		}
	}
	for _, r := range rows {
		st, err := (&client.Client{BaseURL: r.url, HTTP: httpClient}).Cluster(context.Background())
		if err != nil {
			t.Fatalf("node %s: %v", r.idx, err)
		}
		if len(st.Members) != 3 || st.NodeID != r.id || st.MasterID != master {
			t.Errorf("node %s /cluster: id %s, master %s, %d members; want %s, %s, 3", r.idx, st.NodeID, st.MasterID, len(st.Members), r.id, master)
		}
	}
	// The demo's files: a private key, one log per node.
	if st, err := os.Stat(filepath.Join(dir, "cluster.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("cluster.key: %v, %v; want mode 0600", st, err)
	}
	for i := range 3 {
		if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node-%d", i), "agent.log")); err != nil || !strings.Contains(string(b), "agent started") {
			t.Errorf("node-%d/agent.log: %v\n%s", i, err, b)
		}
	}

	// orrery bench against the demo cluster: two placements (with
	// --gpu-layers 0, which each instance keeps), every run with speeds,
	// its trace listed by the API, and a cluster snapshot with link
	// telemetry.
	jsonOut := filepath.Join(t.TempDir(), "bench.json")
	cmd := exec.Command(bin, "bench", "--api", rows[0].url, "--model", "orrery-demo-small", "--placements", "1,2", "--gpu-layers", "0",
		"--pp", "16", "--tg", "8", "--warmup", "0", "--repeat", "2", "--metrics-interval", "200ms", "--json-out", jsonOut)
	benchOut, err := cmd.CombinedOutput()
	if err != nil {
		_, models, _ := (&agentProc{addr: strings.TrimPrefix(rows[0].url, "http://")}).get("/state/nodeModels")
		t.Fatalf("orrery bench: %v\n%s\nnodeModels: %s", err, benchOut, models)
	}
	if !regexp.MustCompile(`(?m)^\s+placement\s+plan\s+pp\s+tg\s+conc\s+prompt tok/s\s+gen tok/s\s+predicted`).Match(benchOut) || !strings.Contains(string(benchOut), "4/4") {
		t.Errorf("bench output lacks the progress or the table:\n%s", benchOut)
	}
	// The demo measured the machine's speed: each run has the plan placed
	// and its prediction beside the measured decode.
	if !regexp.MustCompile(`(?m)1 node\(s\): \S+\s+one node\s+16\s+8\s+1\s+[\d.]+\s+[\d.]+\s+[\d.]+`).Match(benchOut) ||
		!regexp.MustCompile(`(?m)2 node\(s\): \S+\s+pipeline 2\s+16\s+8\s+1\s+[\d.]+\s+[\d.]+\s+[\d.]+`).Match(benchOut) {
		t.Errorf("bench output lacks the progress or the table:\n%s", benchOut)
	}
	raw, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Runs []struct {
			Nodes      []string                            `json:"nodes"`
			PromptTPS  float64                             `json:"prompt_tps"`
			GenTPS     float64                             `json:"gen_tps"`
			TTFTMs     float64                             `json:"ttft_ms"`
			GenTokens  int                                 `json:"gen_tokens"`
			PromptToks int                                 `json:"prompt_tokens"`
			TraceID    string                              `json:"trace_id"`
			EnergyJ    *float64                            `json:"energy_j"`
			PeakMemory map[string]struct{ InBytes uint64 } `json:"peak_memory"`
		} `json:"runs"`
		Cluster struct {
			Topology struct {
				Connections []struct {
					RTTMs float64 `json:"rttMs"`
				} `json:"connections"`
			} `json:"topology"`
			NodeLinkTelemetry map[string]struct {
				Links []struct {
					Peer  string  `json:"peer"`
					RTTMs float64 `json:"rttMs"`
				} `json:"links"`
			} `json:"nodeLinkTelemetry"`
			NodeIdentities map[string]any `json:"nodeIdentities"`
		} `json:"cluster"`
		SystemMetrics map[string]map[string]struct {
			Samples int `json:"samples"`
		} `json:"system_metrics"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("bench JSON: %v\n%s", err, raw)
	}
	if len(res.Runs) != 4 {
		t.Fatalf("%d runs, want 2 placements × 2 repeats:\n%s", len(res.Runs), raw)
	}
	for i, r := range res.Runs {
		if wantNodes := 1 + i/2; len(r.Nodes) != wantNodes {
			t.Errorf("run %d on %d nodes, want %d", i, len(r.Nodes), wantNodes)
		}
		if r.PromptTPS <= 0 || r.GenTPS <= 0 || r.TTFTMs <= 0 || r.GenTokens != 8 || r.PromptToks < 12 || r.PromptToks > 20 {
			t.Errorf("run %d: %+v", i, r)
		}
		if r.EnergyJ != nil && *r.EnergyJ <= 0 {
			t.Errorf("run %d: energy %v: unknown must be null, never 0", i, *r.EnergyJ)
		}
		if len(r.PeakMemory) != len(r.Nodes) {
			t.Errorf("run %d: peak memory for %d nodes, want %d", i, len(r.PeakMemory), len(r.Nodes))
		}
		if code, b, _ := (&agentProc{addr: strings.TrimPrefix(rows[0].url, "http://")}).get("/v1/traces/" + r.TraceID); r.TraceID == "" || code != 200 {
			// The trace may still be merging: wait for it.
			poll(t, m, 15*time.Second, "bench trace "+r.TraceID, func() (bool, string) {
				code, b, _ = m.get("/v1/traces/" + r.TraceID)
				return r.TraceID != "" && code == 200, string(b)
			})
		}
	}
	if len(res.Cluster.NodeIdentities) != 3 || len(res.Cluster.Topology.Connections) != 6 || len(res.Cluster.NodeLinkTelemetry) != 3 {
		t.Errorf("cluster snapshot: %d identities, %d connections, %d nodes' links", len(res.Cluster.NodeIdentities), len(res.Cluster.Topology.Connections), len(res.Cluster.NodeLinkTelemetry))
	}
	for id, nl := range res.Cluster.NodeLinkTelemetry {
		if len(nl.Links) != 2 || nl.Links[0].RTTMs <= 0 {
			t.Errorf("node %s links in the snapshot: %+v", id, nl.Links)
		}
	}
	if len(res.SystemMetrics) != 3 {
		t.Errorf("system metrics for %d nodes, want 3: %+v", len(res.SystemMetrics), res.SystemMetrics)
	}
	// The bench's last placement is still there, placed with its GPU
	// layers.
	var insts map[string]struct {
		ModelID   string
		GPULayers json.RawMessage
	}
	m.mustGet(t, "/state/instances", &insts)
	benched := 0
	for id, in := range insts {
		if in.ModelID == "orrery-demo-small" {
			benched++
			if string(in.GPULayers) != "0" {
				t.Errorf("instance %s placed by orrery bench --gpu-layers 0: gpuLayers %s", id, in.GPULayers)
			}
		}
	}
	if benched == 0 {
		t.Errorf("no instance of the model after orrery bench: %+v", insts)
	}

	d.stop(t, os.Interrupt)
	for _, r := range rows {
		addr := strings.TrimPrefix(r.url, "http://")
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("node %s (%s) still accepts connections after the demo exited", r.idx, addr)
		}
	}
	if !strings.Contains(d.stderr.String(), "all nodes stopped") {
		t.Errorf("stderr lacks \"all nodes stopped\":\n%s", d.stderr.String())
	}

	// The same dir again: node 0 keeps its id. SIGTERM stops it too.
	d = startDemo(t, bin, "--nodes", "1", "--base-port", strconv.Itoa(base), "--dir", dir)
	again, text := d.table(t)
	if len(again) != 1 || again[0].id != rows[0].id || again[0].role != "master" {
		t.Errorf("second run printed %+v, want node 0 = %s as master:\n%s", again, rows[0].id, text)
	}
	d.stop(t, syscall.SIGTERM)
}

// TestDemoRepeat runs "orrery demo" three times on one directory, as
// repeated `make run`s do, with the trained KJV pair make run serves:
// every run streams its chat, drafted by the draft model, the later ones
// reuse the instance the first placed (restored from the demo dir), and
// one instance of the demo model exists at the end of each. Each run ends
// with Ctrl-C to the demo's process group, timed until every process of it
// is gone (printed; the goal is 2 s).
func TestDemoRepeat(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (repeated demos with the KJV pair): runs in make test")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	base := testutil.FreeBasePort(t, 3)
	kjv := filepath.Join("..", "..", "models", "kjv")
	first := ""
	for run := 1; run <= 3; run++ {
		d := startDemo(t, bin, "--nodes", "3", "--base-port", strconv.Itoa(base), "--dir", dir,
			"--model", filepath.Join(kjv, "kjv-target-f16.gguf"), "--draft", filepath.Join(kjv, "kjv-draft-f16.gguf"))
		rows, _ := d.table(t)
		d.lineAfter(t, "The chat left trace ")
		out := strings.Join(d.seen, "\n")
		if !regexp.MustCompile(`\d+ tokens in [0-9.]+ s `).MatchString(out) || !strings.Contains(out, "Chat with kjv-target-f16 split over 3 nodes") {
			t.Fatalf("run %d: no chat streamed:\n%s\nstderr:\n%s", run, out, d.stderr.String())
		}
		if m := regexp.MustCompile(`speculation: (\d+) tokens drafted, (\d+) accepted`).FindStringSubmatch(out); m == nil || m[1] == "0" {
			t.Errorf("run %d: the chat drafted nothing:\n%s", run, out)
		}
		if run == 1 {
			t.Logf("the demo's chat:\n%s", out[strings.Index(out, "Chat with"):])
		}
		var ins map[string]struct {
			ModelID string `json:"modelId"`
		}
		(&agentProc{addr: strings.TrimPrefix(rows[0].url, "http://")}).mustGet(t, "/state/instances", &ins)
		var demo []string
		for id, in := range ins {
			if in.ModelID == "kjv-target-f16" {
				demo = append(demo, id)
			}
		}
		if len(demo) != 1 {
			t.Fatalf("run %d: instances of the demo model %v, want one\nstderr:\n%s", run, demo, d.stderr.String())
		}
		reused := strings.Contains(d.stderr.String(), "reusing it")
		switch {
		case run == 1 && reused:
			t.Errorf("run 1 says it reused an instance:\n%s", d.stderr.String())
		case run > 1 && (!reused || demo[0] != first):
			t.Errorf("run %d: instance %s (reused: %v), want the first run's %s reused\nstderr:\n%s", run, demo[0], reused, first, d.stderr.String())
		}
		first = demo[0]
		took := d.interruptGroup(t)
		t.Logf("run %d: chat streamed through instance %s; Ctrl-C ended the demo, its 3 agents and their runners in %v", run, demo[0], took.Round(time.Millisecond))
	}
}
