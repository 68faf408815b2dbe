package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/cluster/auth"
)

// Demo limits and timings.
const (
	demoDefaultNodes    = 3
	demoMaxNodes        = 16
	demoDefaultBasePort = 52416
	// demoReadyTimeout bounds the wait for every node to answer and agree
	// on one master.
	demoReadyTimeout = 30 * time.Second
	// demoStopTimeout is how long a node gets to exit after SIGTERM before
	// it is killed.
	demoStopTimeout = 10 * time.Second
	// demoPollEvery is the readiness polling period.
	demoPollEvery = 100 * time.Millisecond
	// demoSignalGrace: a node that exits while the demo is up is reported
	// only if no stop signal reaches the demo within this time (see wait).
	demoSignalGrace = 500 * time.Millisecond
)

const demoUsage = `Usage: orrery demo [flags]

Starts a cluster of agents on this machine, one process each, that find each
other through a shared loopback dir and share a cluster key. It prints each
node's API URL once they agree on a master, runs a ring benchmark, then
generates a small random-weight model on the last node, places it there and
streams one chat completion through node 0 (printing its tok/s and trace id).
Ctrl-C stops them all.

Flags:
`

// demoOptions configures runDemo. The zero value of a field means its
// default.
type demoOptions struct {
	// Nodes is how many agents to start, 1..16 (default 3).
	Nodes int
	// BasePort is node 0's API port; node i listens on 127.0.0.1:BasePort+i
	// (default 52416, the agent's default API port, so that node 0 answers where every tool looks first).
	BasePort int
	// Dir holds the cluster key, the loopback dir and node-<i>/ per node
	// (default <os.TempDir()>/orrery-demo). It is kept across runs, so node
	// ids persist.
	Dir string
	// LogLevel is passed to every agent (default info).
	LogLevel string
	// Exe is the orrery binary to start the agents with (default
	// os.Executable(): this very binary).
	Exe string
	// NoChat skips the chat: no model is generated, placed or asked.
	NoChat bool
}

func demoDefaultDir() string { return filepath.Join(os.TempDir(), "orrery-demo") }

// withDefaults fills the zero fields and checks the result.
func (o demoOptions) withDefaults() (demoOptions, error) {
	if o.Nodes == 0 {
		o.Nodes = demoDefaultNodes
	}
	if o.BasePort == 0 {
		o.BasePort = demoDefaultBasePort
	}
	if o.Dir == "" {
		o.Dir = demoDefaultDir()
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	return o, o.validate()
}

// validate checks options as given (a zero is an error here).
func (o demoOptions) validate() error {
	if o.Nodes < 1 || o.Nodes > demoMaxNodes {
		return fmt.Errorf("--nodes %d: want 1..%d", o.Nodes, demoMaxNodes)
	}
	if o.BasePort < 1 || o.BasePort+o.Nodes-1 > 65535 {
		return fmt.Errorf("--base-port %d: want 1..%d for %d nodes", o.BasePort, 65535-o.Nodes+1, o.Nodes)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToLower(o.LogLevel))); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.LogLevel)
	}
	return nil
}

// runDemoCmd runs "orrery demo": 0 after a clean stop, 1 if the demo could
// not start or failed, 2 on usage errors.
func runDemoCmd(args []string, stdout, stderr io.Writer) int {
	var opts demoOptions
	fs := flag.NewFlagSet("orrery demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), demoUsage)
		fs.PrintDefaults()
	}
	fs.IntVar(&opts.Nodes, "nodes", demoDefaultNodes, fmt.Sprintf("number of agents to start (1..%d)", demoMaxNodes))
	fs.IntVar(&opts.BasePort, "base-port", demoDefaultBasePort, "API port of node 0; node i gets base-port+i, on 127.0.0.1")
	fs.StringVar(&opts.Dir, "dir", demoDefaultDir(), "directory for the cluster key, the loopback dir and each node's data (node-<i>/, kept across runs)")
	fs.BoolVar(&opts.NoChat, "no-chat", false, "skip generating, placing and chatting with the demo model")
	fs.StringVar(&opts.LogLevel, "log-level", "info", "the agents' log level: debug, info, warn or error (logs go to <dir>/node-<i>/agent.log)")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if opts.Dir == "" {
		opts.Dir = demoDefaultDir()
	}
	if err := opts.validate(); err != nil {
		fmt.Fprintf(stderr, "orrery demo: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runDemo(ctx, opts, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "orrery demo: %v\n", err)
		return 1
	}
	return 0
}

// demoNode is one agent process of the demo.
type demoNode struct {
	idx     int
	port    int
	url     string // http://127.0.0.1:port
	dataDir string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, set before done closes
	id      string        // from /healthz, once it answered
	master  bool
}

func (n *demoNode) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// runDemo starts opts.Nodes agents, waits until they form one cluster,
// prints the table of nodes on stdout, and keeps them running until ctx
// ends; then it stops them all and returns nil. It returns an error if the
// demo cannot start (busy port, a node that exits or a cluster that does
// not form within 30 s); the nodes it started are stopped by then.
// Progress and node failures go to stderr.
func runDemo(ctx context.Context, opts demoOptions, stdout, stderr io.Writer) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	// Check every port before starting anything, and name the busy one.
	for i := range opts.Nodes {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.BasePort+i))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("port %d (node %d's API, %s) is busy: %w; stop what uses it or pick another --base-port", opts.BasePort+i, i, addr, err)
		}
		ln.Close()
	}
	exe := opts.Exe
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("cannot find this program's path to start the agents: %w", err)
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return fmt.Errorf("demo dir: %w", err)
	}
	// Only the key file in the demo dir counts: not $ORRERY_CLUSTER_KEY,
	// not ~/.orrery, so that the demo never joins a real cluster.
	key, _, err := auth.LoadOrCreateKey(opts.Dir, func(string) string { return "" })
	if err != nil {
		return fmt.Errorf("demo cluster key: %w", err)
	}
	env := []string{auth.EnvKey + "=" + key.String()}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, auth.EnvKey+"=") {
			env = append(env, kv)
		}
	}
	loopbackDir := filepath.Join(opts.Dir, "loopback")

	nodes := make([]*demoNode, 0, opts.Nodes)
	exits := make(chan *demoNode, opts.Nodes)
	fmt.Fprintf(stderr, "orrery demo: starting %d agents (data in %s, logs in %s)\n",
		opts.Nodes, opts.Dir, filepath.Join(opts.Dir, "node-<i>", "agent.log"))
	for i := range opts.Nodes {
		n := &demoNode{
			idx:     i,
			port:    opts.BasePort + i,
			dataDir: filepath.Join(opts.Dir, fmt.Sprintf("node-%d", i)),
			done:    make(chan struct{}),
		}
		n.url = fmt.Sprintf("http://127.0.0.1:%d", n.port)
		n.logPath = filepath.Join(n.dataDir, "agent.log")
		if err := startDemoNode(n, exe, env, loopbackDir, opts.LogLevel, exits); err != nil {
			stopDemoNodes(nodes, io.Discard)
			return fmt.Errorf("node %d: %w", i, err)
		}
		nodes = append(nodes, n)
	}

	ready, err := waitDemoReady(ctx, nodes, exits, stderr)
	if err != nil {
		stopDemoNodes(nodes, stderr)
		return err
	}
	if !ready { // stopped while starting
		fmt.Fprintln(stderr, "orrery demo: interrupted before the cluster formed")
		stopDemoNodes(nodes, stderr)
		return nil
	}
	printDemoTable(stdout, opts, nodes)
	if len(nodes) > 1 {
		// Leave a real multi-node trace to look at: one ring benchmark,
		// coordinated by the master, which keeps the merged trace.
		m := nodes[0]
		for _, n := range nodes {
			if n.master {
				m = n
			}
		}
		fmt.Fprintln(stderr, "orrery demo: running a ring benchmark (4 MiB × 3 rounds) to leave a trace …")
		if err := waitProbed(ctx, m.url, len(nodes)-1); err != nil {
			fmt.Fprintf(stderr, "orrery demo: %v; the trace's clocks may be uncorrected\n", err)
		}
		if id, err := demoRingTrace(ctx, m.url); err != nil {
			fmt.Fprintf(stderr, "orrery demo: ring benchmark: %v\n", err)
		} else {
			fmt.Fprintf(stdout, "\nA ring benchmark left trace %s on node %d (the master):\n  curl %s/v1/traces/%s/stats\n  Perfetto: open %s/perfetto/%s in a browser (or: orrery trace open %s --api %s)\n",
				id, m.idx, m.url, id, m.url, id, id, m.url)
		}
	}
	if !opts.NoChat {
		m := demoMaster(nodes)
		if id, err := demoChat(ctx, nodes, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "orrery demo: chat: %v\n", err)
		} else {
			fmt.Fprintf(stdout, "The chat left trace %s on node %d (the master):\n  orrery trace stats %s --api %s\n  Perfetto: open %s/perfetto/%s in a browser\n  Chat yourself: curl %s/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n",
				id, m.idx, id, m.url, m.url, id, nodes[0].url, demoModel)
		}
	}
	return waitDemo(ctx, nodes, exits, stderr)
}

// demoMaster is the node that reported itself master (node 0 if none did).
func demoMaster(nodes []*demoNode) *demoNode {
	for _, n := range nodes {
		if n.master {
			return n
		}
	}
	return nodes[0]
}

// waitProbed waits (at most 10 s) until the agent at url has probed its
// links to peers others, so that it knows their clock offsets.
func waitProbed(ctx context.Context, url string, peers int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		var st struct {
			Links []struct {
				Probes int `json:"probes"`
			} `json:"links"`
		}
		probed := 0
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/cluster", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st)
			resp.Body.Close()
			for _, l := range st.Links {
				if l.Probes > 0 {
					probed++
				}
			}
		}
		if probed >= peers {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("links to %d of %d peers probed", probed, peers)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// demoRingTrace runs a small ring benchmark from the agent at url (the
// master) and returns the id of the trace it saved.
func demoRingTrace(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	body := strings.NewReader(`{"sizeBytes":4194304,"rounds":3}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/cluster/ring-bench", body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		TraceID    string `json:"traceId"`
		TraceSaved bool   `json:"traceSaved"`
		Error      string `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return "", fmt.Errorf("decode answer (%s): %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || out.TraceID == "" {
		return "", fmt.Errorf("%s: %s", resp.Status, out.Error)
	}
	if !out.TraceSaved {
		return "", fmt.Errorf("trace %s was not saved (see the master's agent.log)", out.TraceID)
	}
	return out.TraceID, nil
}

// startDemoNode starts one agent with its stderr (and stdout) appended to
// its agent.log. The process's exit is sent on exits.
func startDemoNode(n *demoNode, exe string, env []string, loopbackDir, logLevel string, exits chan<- *demoNode) error {
	if err := os.MkdirAll(n.dataDir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(n.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer logf.Close() // the child has its own copy once started
	fmt.Fprintf(logf, "--- orrery demo: starting node %d at %s ---\n", n.idx, time.Now().Format(time.RFC3339))
	n.cmd = exec.Command(exe, "agent",
		"--api-addr", fmt.Sprintf("127.0.0.1:%d", n.port),
		"--data-dir", n.dataDir,
		"--peer-addr", "127.0.0.1:0",
		"--mdns=false",
		"--loopback-dir", loopbackDir,
		"--log-level", logLevel)
	n.cmd.Env = env
	n.cmd.Stdout = logf
	n.cmd.Stderr = logf
	// The children stay in the demo's process group, so that nothing
	// OS-specific is needed and a Ctrl-C in the terminal reaches them too
	// (they stop on it); the demo SIGTERMs them anyway on its own signal.
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("start %s agent: %w", exe, err)
	}
	go func() {
		n.err = n.cmd.Wait()
		close(n.done)
		exits <- n
	}()
	return nil
}

// demoNodeExit describes how a node ended, with where to look.
func demoNodeExit(n *demoNode) string {
	how := "exited"
	if n.err != nil {
		how = "exited: " + n.err.Error()
	}
	name := fmt.Sprintf("node %d", n.idx)
	if n.id != "" {
		name += " (" + n.id + ")"
	}
	return fmt.Sprintf("%s %s; its log is %s", name, how, n.logPath)
}

// demoLogTail returns the last lines of a log file, indented, or "".
func demoLogTail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 4096
	if st, err := f.Stat(); err == nil && st.Size() > max {
		f.Seek(st.Size()-max, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, max))
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return "    " + strings.Join(ls, "\n    ")
}

// waitDemoReady polls the nodes until every one answers /healthz and they
// all report the same master and len(nodes) members. It returns false, nil
// if ctx ends first, and an error if a node exits or 30 s pass.
func waitDemoReady(ctx context.Context, nodes []*demoNode, exits <-chan *demoNode, stderr io.Writer) (bool, error) {
	client := &http.Client{Timeout: time.Second}
	deadline := time.NewTimer(demoReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(demoPollEvery)
	defer tick.Stop()
	var last string
	var lastAt time.Time
	for {
		ok, msg := demoReady(ctx, client, nodes)
		if ok {
			return true, nil
		}
		if msg != last && time.Since(lastAt) >= time.Second {
			fmt.Fprintf(stderr, "orrery demo: waiting: %s\n", msg)
			last, lastAt = msg, time.Now()
		}
		select {
		case <-ctx.Done():
			return false, nil
		case n := <-exits:
			err := fmt.Errorf("%s", demoNodeExit(n))
			if t := demoLogTail(n.logPath, 5); t != "" {
				err = fmt.Errorf("%w; it ends with:\n%s", err, t)
			}
			return false, err
		case <-deadline.C:
			return false, fmt.Errorf("the nodes did not form one cluster within %v (last: %s); their logs are %s",
				demoReadyTimeout, msg, filepath.Join(filepath.Dir(nodes[0].dataDir), "node-*", "agent.log"))
		case <-tick.C:
		}
	}
}

// demoReady checks once whether the cluster has formed, and says what it
// waits for if not. It records each node's id and role.
func demoReady(ctx context.Context, client *http.Client, nodes []*demoNode) (bool, string) {
	healthy := 0
	for _, n := range nodes {
		var h doctorHealth
		if err := apiGet(ctx, client, n.url, "/healthz", &h); err == nil && h.NodeID != "" {
			n.id = h.NodeID
			healthy++
		}
	}
	if healthy < len(nodes) {
		return false, fmt.Sprintf("%d of %d nodes answer /healthz", healthy, len(nodes))
	}
	master := ""
	for _, n := range nodes {
		var st doctorCluster
		if err := apiGet(ctx, client, n.url, "/cluster", &st); err != nil {
			return false, fmt.Sprintf("node %d: %v", n.idx, err)
		}
		switch {
		case st.MasterID == "":
			return false, fmt.Sprintf("node %d has no master yet", n.idx)
		case len(st.Members) != len(nodes):
			return false, fmt.Sprintf("node %d sees %d of %d members", n.idx, len(st.Members), len(nodes))
		case master != "" && st.MasterID != master:
			return false, fmt.Sprintf("nodes disagree on the master (%s, %s)", master, st.MasterID)
		}
		master = st.MasterID
		n.master = st.IsMaster
	}
	return true, ""
}

func printDemoTable(w io.Writer, opts demoOptions, nodes []*demoNode) {
	fmt.Fprintf(w, "Orrery demo: %d nodes on this machine, one master.\n\n", len(nodes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNODE ID\tAPI\tROLE")
	for _, n := range nodes {
		role := "worker"
		if n.master {
			role = "master"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", n.idx, n.id, n.url, role)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nOpen the UI: %s/  (cluster topology, traces with a timeline, chat)\n", nodes[0].url)
	fmt.Fprintf(w, "Try: curl %s/state/topology  and  curl %s/cluster\n", nodes[0].url, nodes[0].url)
	fmt.Fprintf(w, "Ask a node how it sees the cluster: orrery doctor --api %s\n", nodes[0].url)
	fmt.Fprintf(w, "Logs: %s. Press Ctrl-C to stop every node.\n", filepath.Join(opts.Dir, "node-<i>", "agent.log"))
}

// waitDemo keeps the demo up until ctx ends, reporting nodes that exit,
// then stops the others. It fails only when every node has exited.
func waitDemo(ctx context.Context, nodes []*demoNode, exits <-chan *demoNode, stderr io.Writer) error {
	alive := len(nodes)
	for {
		select {
		case <-ctx.Done():
			stopDemoNodes(nodes, stderr)
			return nil
		case n := <-exits:
			// A Ctrl-C in the terminal reaches the nodes as well as the
			// demo: give the demo's own signal a moment to arrive before
			// calling this exit a failure.
			select {
			case <-ctx.Done():
				stopDemoNodes(nodes, stderr)
				return nil
			case <-time.After(demoSignalGrace):
			}
			alive--
			fmt.Fprintf(stderr, "orrery demo: %s\n", demoNodeExit(n))
			if alive == 0 {
				return errors.New("every node has exited")
			}
			fmt.Fprintf(stderr, "orrery demo: %d of %d nodes keep running\n", alive, len(nodes))
		}
	}
}

// stopDemoNodes SIGTERMs every node still running, waits up to 10 s for
// each and kills those still there.
func stopDemoNodes(nodes []*demoNode, stderr io.Writer) {
	running := 0
	for _, n := range nodes {
		if !n.exited() {
			running++
		}
	}
	if running > 0 {
		fmt.Fprintf(stderr, "orrery demo: stopping %d nodes\n", running)
	}
	finished := make(chan string, len(nodes))
	for _, n := range nodes {
		go func() {
			if n.exited() {
				finished <- ""
				return
			}
			if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
				n.cmd.Process.Kill()
			}
			select {
			case <-n.done:
				finished <- ""
			case <-time.After(demoStopTimeout):
				n.cmd.Process.Kill()
				<-n.done
				finished <- fmt.Sprintf("node %d did not stop within %v after SIGTERM and was killed; its log is %s", n.idx, demoStopTimeout, n.logPath)
			}
		}()
	}
	for range nodes {
		if msg := <-finished; msg != "" {
			fmt.Fprintf(stderr, "orrery demo: %s\n", msg)
		}
	}
	if running > 0 {
		fmt.Fprintln(stderr, "orrery demo: all nodes stopped")
	}
}
