package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/internal/ident"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRun(t *testing.T) {
	// The flag package lists flags with one dash ("-api-addr"); both
	// spellings are accepted on the command line.
	agentFlags := []string{"-api-addr", "-data-dir", "-memory-interval", "-system-interval",
		"-disk-interval", "-network-interval", "-log-level", "Usage of orrery agent"}
	tests := []struct {
		name       string
		args       []string
		code       int
		wantOut    []string
		wantErr    []string
		stdoutOnly bool // nothing may go to stderr
	}{
		{name: "version", args: []string{"version"}, code: 0, wantOut: []string{"orrery " + version + " ("}, stdoutOnly: true},
		{name: "--version", args: []string{"--version"}, code: 0, wantOut: []string{"orrery "}, stdoutOnly: true},
		{name: "help", args: []string{"help"}, code: 0, wantOut: []string{"Usage:", "orrery agent"}, stdoutOnly: true},
		{name: "-h", args: []string{"-h"}, code: 0, wantOut: []string{"Usage:"}, stdoutOnly: true},
		{name: "no args", args: nil, code: 2, wantErr: []string{"Usage:", "orrery agent", "orrery version"}},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, wantErr: []string{`unknown command "frobnicate"`, "Usage:"}},
		{name: "agent bogus flag", args: []string{"agent", "--bogus"}, code: 2, wantErr: []string{"flag provided but not defined: -bogus", "-api-addr"}},
		{name: "agent bad log level", args: []string{"agent", "--log-level", "loud"}, code: 2, wantErr: []string{"--log-level", `"loud"`}},
		{name: "agent bad duration", args: []string{"agent", "--memory-interval", "soon"}, code: 2, wantErr: []string{"memory-interval"}},
		{name: "agent bad gpu", args: []string{"agent", "--gpu", "maybe"}, code: 2, wantErr: []string{"-gpu", `"maybe": want on or off`}},
		{name: "agent bad gpu layers", args: []string{"agent", "--gpu-layers", "-2"}, code: 2, wantErr: []string{"-gpu-layers", `"-2": want auto, 0 or a number`}},
		{name: "agent extra argument", args: []string{"agent", "extra"}, code: 2, wantErr: []string{`unexpected argument "extra"`}},
		{name: "agent -h", args: []string{"agent", "-h"}, code: 0, wantErr: agentFlags},
		{name: "agent --help", args: []string{"agent", "--help"}, code: 0, wantErr: agentFlags},
		// Config validation fails in agent.New, before anything is bound.
		{name: "agent interval too short", args: []string{"agent", "--data-dir", t.TempDir(),
			"--api-addr", "127.0.0.1:0", "--memory-interval", "1ms"}, code: 1, wantErr: []string{"cannot start agent", "memory interval"}},
		{name: "agent bad api addr", args: []string{"agent", "--data-dir", t.TempDir(),
			"--api-addr", "no-port"}, code: 1, wantErr: []string{"cannot start agent", "no-port"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCLI(tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errs)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errs)
				}
			}
			if tc.stdoutOnly && errs != "" {
				t.Errorf("unexpected stderr: %s", errs)
			}
			if tc.wantOut == nil && out != "" {
				t.Errorf("unexpected stdout: %s", out)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer = testutil.SyncBuffer

// built is the orrery binary the process tests share: linking it (ggml
// included) takes seconds, so it is built once per test run.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// buildBinary builds the orrery command (once per test binary).
func buildBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			built.err = fmt.Errorf("the go tool is needed to build the binary: %v", err)
			return
		}
		if built.dir, err = os.MkdirTemp("", "orrery-test-bin-"); err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(built.dir, "orrery")
		if out, err := exec.Command(goTool, "build", "-o", built.bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

type agentProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, set before done closes
}

func startAgent(t *testing.T, bin, addr, dataDir string, extra ...string) *agentProc {
	t.Helper()
	return startAgentEnv(t, bin, addr, dataDir, nil, extra...)
}

// startAgentEnv starts an agent with extra environment variables. Peer
// links go to a free loopback port and mDNS is off unless extra says
// otherwise (later flags win), so tests never touch port 52400 or 5353.
func startAgentEnv(t *testing.T, bin, addr, dataDir string, env []string, extra ...string) *agentProc {
	t.Helper()
	// No speed benchmark at start (3 s of both cores) unless a test asks
	// for one with its own --speed.
	args := append([]string{"agent", "--api-addr", addr, "--data-dir", dataDir, "--peer-addr", "127.0.0.1:0", "--mdns=false", "--speed", "off"}, extra...)
	p := &agentProc{cmd: exec.Command(bin, args...), addr: addr, stderr: &syncBuffer{}, done: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start agent: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits up to d for the process to exit and returns its exit code.
func (p *agentProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("agent still running after %v\nstderr:\n%s", d, p.stderr.String())
	}
	var ee *exec.ExitError
	if p.err != nil && !errors.As(p.err, &ee) {
		t.Fatalf("wait: %v", p.err)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *agentProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func (p *agentProc) get(path string) (int, []byte, error) {
	resp, err := httpClient.Get("http://" + p.addr + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// post sends a JSON body, with no client timeout (for long runs).
func (p *agentProc) post(path, body string) (int, []byte, error) {
	resp, err := http.Post("http://"+p.addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (p *agentProc) mustGet(t *testing.T, path string, v any) {
	t.Helper()
	code, b, err := p.get(path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: decode %s: %v", path, b, err)
	}
}

// poll waits until cond holds, for at most limit; it fails if the agent
// exits meanwhile.
func poll(t *testing.T, p *agentProc, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	exited := func() string {
		if p.exited() {
			return "the agent\nstderr:\n" + p.stderr.String()
		}
		return ""
	}
	pollUntil(t, limit, what, exited, func() string { return "stderr:\n" + p.stderr.String() }, cond)
}

// pollUntil is the process tests' one wait: it polls cond
// (testutil.Eventually) until it holds and returns how long that took. It
// fails the test when exited names a process that has exited, or after
// limit, with cond's last message and logs().
func pollUntil(t *testing.T, limit time.Duration, what string, exited, logs func() string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last, gone := "", ""
	ok := testutil.Eventually(limit, func() bool {
		ok, msg := cond()
		if !ok {
			last, gone = msg, exited()
		}
		return ok || gone != ""
	})
	switch {
	case gone != "":
		t.Fatalf("%s exited while waiting for %s (%s)", gone, what, last)
	case !ok:
		t.Fatalf("no %s within %v (last: %s)\n%s", what, limit, last, logs())
	}
	return time.Since(start)
}

// api is a client of the agent's API.
func (p *agentProc) api() *client.Client {
	return &client.Client{BaseURL: "http://" + p.addr, HTTP: httpClient}
}

func waitHealthy(t *testing.T, p *agentProc) {
	t.Helper()
	poll(t, p, 15*time.Second, "healthy /healthz", func() (bool, string) {
		code, b, err := p.get("/healthz")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, b)
	})
}

func stop(t *testing.T, p *agentProc) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("agent exited %d after SIGTERM, want 0\nstderr:\n%s", code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "agent stopped") {
		t.Errorf("stderr lacks \"agent stopped\":\n%s", p.stderr.String())
	}
}

func TestAgentProcess(t *testing.T) {
	bin := buildBinary(t)

	t.Run("version", func(t *testing.T) {
		out, err := exec.Command(bin, "version").Output()
		if err != nil || !strings.HasPrefix(string(out), "orrery ") {
			t.Errorf("orrery version = %q, %v", out, err)
		}
	})

	dataDir := t.TempDir()
	var firstID string

	t.Run("serves, samples, stops on SIGTERM", func(t *testing.T) {
		p := startAgent(t, bin, testutil.FreeAddr(t), dataDir, "--memory-interval", "100ms", "--log-level", "debug")
		waitHealthy(t, p)

		var health struct {
			Status  string `json:"status"`
			NodeID  string `json:"nodeId"`
			Version string `json:"version"`
		}
		p.mustGet(t, "/healthz", &health)
		if health.Status != "ok" || health.Version != "dev" {
			t.Errorf("healthz = %+v", health)
		}

		p.mustGet(t, "/node_id", &firstID)
		if err := ident.ValidNodeID(firstID); err != nil {
			t.Fatalf("node id: %v", err)
		}
		if health.NodeID != firstID {
			t.Errorf("healthz nodeId %q, /node_id %q", health.NodeID, firstID)
		}
		// The id is the one persisted in the data dir.
		var rec struct {
			NodeID string `json:"nodeId"`
		}
		b, err := os.ReadFile(filepath.Join(dataDir, "node.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rec); err != nil || rec.NodeID != firstID {
			t.Errorf("node.json = %s (%v), want nodeId %q", b, err, firstID)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "models")); err != nil {
			t.Errorf("models dir: %v", err)
		}

		// Wait for the memory sampler to have published a few samples.
		var page struct {
			Events []state.Indexed `json:"events"`
			Next   int64           `json:"next"`
		}
		poll(t, p, 15*time.Second, "4 memory events", func() (bool, string) {
			page.Events = nil
			code, b, err := p.get("/events?since=0")
			if err != nil {
				return false, err.Error()
			}
			if code != http.StatusOK {
				return false, fmt.Sprintf("%d %s", code, b)
			}
			if err := json.Unmarshal(b, &page); err != nil {
				t.Fatalf("/events: %v: %s", err, b)
			}
			n := 0
			for _, ie := range page.Events {
				if ie.Event.Type() == "NodeMemoryMeasured" {
					n++
				}
			}
			return n >= 4, fmt.Sprintf("%d memory events of %d", n, len(page.Events))
		})
		for i, ie := range page.Events {
			if ie.Idx != int64(i) {
				t.Fatalf("event %d has idx %d", i, ie.Idx)
			}
			if ie.Event.Node() != firstID {
				t.Errorf("event %d is about node %q, want %q", i, ie.Event.Node(), firstID)
			}
		}
		if page.Events[0].Event.Type() != "NodeIdentityMeasured" {
			t.Errorf("first event is %s, want NodeIdentityMeasured", page.Events[0].Event.Type())
		}
		if page.Next != int64(len(page.Events)) {
			t.Errorf("next = %d after %d events", page.Next, len(page.Events))
		}

		var mem struct {
			RAMTotal     *state.Memory `json:"ramTotal"`
			RAMAvailable *state.Memory `json:"ramAvailable"`
			SampledAt    time.Time     `json:"sampledAt"`
		}
		p.mustGet(t, "/state/nodeMemory/"+firstID, &mem)
		if mem.RAMTotal == nil || mem.RAMTotal.InBytes == 0 {
			t.Fatalf("ramTotal = %v, want > 0", mem.RAMTotal)
		}
		if mem.RAMAvailable == nil || mem.RAMAvailable.InBytes == 0 || mem.RAMAvailable.InBytes > mem.RAMTotal.InBytes {
			t.Errorf("ramAvailable = %v, want in (0, %d]", mem.RAMAvailable, mem.RAMTotal.InBytes)
		}
		if mem.SampledAt.IsZero() {
			t.Error("sampledAt is zero")
		}

		var hist struct {
			NodeID  string               `json:"nodeId"`
			Samples []state.MemorySample `json:"samples"`
		}
		p.mustGet(t, "/history/memory/"+firstID, &hist)
		if hist.NodeID != firstID || len(hist.Samples) < 4 {
			t.Errorf("history: node %q, %d samples; want %q and ≥ 4", hist.NodeID, len(hist.Samples), firstID)
		}

		// exo's bench harness reads these shapes with data.get(k, 0.0) and
		// then does arithmetic: a null would come back as None and break
		// it. This VM lacks power, temperature and GPU readings, so their
		// keys must be absent.
		poll(t, p, 15*time.Second, "the node's system and disk samples in /state", func() (bool, string) {
			_, b, _ := p.get("/state")
			var st map[string]map[string]any
			json.Unmarshal(b, &st)
			return st["nodeSystem"][firstID] != nil && st["nodeDisk"][firstID] != nil, string(b)
		})
		_, stb, _ := p.get("/state")
		var st map[string]any
		if err := json.Unmarshal(stb, &st); err != nil {
			t.Fatalf("/state: %v", err)
		}
		for _, k := range []string{"nodeIdentities", "nodeMemory", "nodeSystem", "nodeDisk", "nodeNetwork", "nodeLinkTelemetry", "topology", "instances", "runners"} {
			if nulls := nullPaths(st[k], k); len(nulls) > 0 {
				t.Errorf("/state has null values, where exo's shapes leave the key out: %v", nulls)
			}
		}

		// A foreign Host is refused by the real server too.
		req, _ := http.NewRequest(http.MethodGet, "http://"+p.addr+"/state", nil)
		req.Host = "evil.example"
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("Host evil.example = %d, want 403", resp.StatusCode)
		}

		if !strings.Contains(p.stderr.String(), "agent started") {
			t.Errorf("stderr lacks \"agent started\":\n%s", p.stderr.String())
		}
		stop(t, p)
		// The port is released.
		if _, _, err := p.get("/healthz"); err == nil {
			t.Error("API still answers after the agent exited")
		}
	})

	t.Run("keeps its node id across restarts", func(t *testing.T) {
		if firstID == "" {
			t.Fatal("first agent did not report a node id")
		}
		p := startAgent(t, bin, testutil.FreeAddr(t), dataDir)
		waitHealthy(t, p)
		var id string
		p.mustGet(t, "/node_id", &id)
		if id != firstID {
			t.Errorf("restarted agent has node id %q, want %q", id, firstID)
		}
		stop(t, p)

		// A fresh data dir gets a fresh id.
		q := startAgent(t, bin, testutil.FreeAddr(t), t.TempDir())
		waitHealthy(t, q)
		var other string
		q.mustGet(t, "/node_id", &other)
		if other == firstID || ident.ValidNodeID(other) != nil {
			t.Errorf("agent with a new data dir has node id %q (first was %q)", other, firstID)
		}
		stop(t, q)
	})

	t.Run("busy port", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		addr := ln.Addr().String()
		p := startAgent(t, bin, addr, t.TempDir())
		code := p.wait(t, 10*time.Second)
		if code == 0 {
			t.Fatalf("agent on a busy port exited 0\nstderr:\n%s", p.stderr.String())
		}
		errs := p.stderr.String()
		if !strings.Contains(errs, addr) || !strings.Contains(errs, "cannot start agent") {
			t.Errorf("stderr does not name the busy address %s:\n%s", addr, errs)
		}
	})
}

// nullPaths lists the JSON pointers under v whose value is null.
func nullPaths(v any, at string) []string {
	var out []string
	switch v := v.(type) {
	case nil:
		out = append(out, at)
	case map[string]any:
		for k, x := range v {
			out = append(out, nullPaths(x, at+"/"+k)...)
		}
	case []any:
		for i, x := range v {
			out = append(out, nullPaths(x, fmt.Sprintf("%s/%d", at, i))...)
		}
	}
	return out
}
