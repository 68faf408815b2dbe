package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/speed"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// Limits and defaults of Options.
const (
	DefaultNodes    = 3
	MaxNodes        = 16
	DefaultBasePort = 52416
)

// Timings.
const (
	// readyTimeout bounds the wait for every node to answer and agree
	// on one master.
	readyTimeout = 30 * time.Second
	// stopTimeout is how long a node gets to exit after SIGTERM before
	// it is killed.
	stopTimeout = 10 * time.Second
	// pollEvery is the readiness polling period.
	pollEvery = 100 * time.Millisecond
	// signalGrace: a node that exits while the demo is up is reported
	// only if no stop signal reaches the demo within this time (see wait).
	signalGrace = 500 * time.Millisecond
	// requestTimeout bounds a request to a node that has no deadline of
	// its own (the readiness polls).
	requestTimeout = time.Second
	// probedTimeout bounds the wait for link probes before the ring
	// benchmark, ringTimeout the benchmark.
	probedTimeout = 10 * time.Second
	ringTimeout   = 30 * time.Second
)

// Options configures Run. The zero value of a field means its
// default.
type Options struct {
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
	// Model is a GGUF file the demo serves (copied into the last node's
	// models); "" generates the random-weight small preset instead.
	// Draft, when set, is a draft model for it (copied to every node),
	// placed beside rank 0 and used to speculate in the chat.
	Model, Draft string
}

// machineSpeed is the file of this machine's speed every node takes (the
// nodes share the machine): measured once, before the agents start so
// that nothing else runs meanwhile, and again when the binary is newer.
// "off" when it cannot be measured.
func machineSpeed(ctx context.Context, exe, dir string, stderr io.Writer) string {
	path := filepath.Join(dir, "speed.json")
	if st, err := os.Stat(path); err == nil {
		if xt, err := os.Stat(exe); err == nil && st.ModTime().After(xt.ModTime()) {
			return path
		}
	}
	fmt.Fprintf(stderr, "orrery demo: measuring this machine's speed for the placement cost model (once, a few seconds)\n")
	_, out, err := speed.Measure(ctx, exe, dir, runtime.NumCPU(), speed.GPUs{})
	if err == nil {
		err = atomicfile.Write(path, out, 0o600)
	}
	if err != nil {
		fmt.Fprintf(stderr, "orrery demo: speed benchmark: %v (the cost model will have no figures)\n", err)
		return "off"
	}
	return path
}

// DefaultDir is where the demo keeps its files unless told otherwise.
func DefaultDir() string { return filepath.Join(os.TempDir(), "orrery-demo") }

// withDefaults fills the zero fields and checks the result.
func (o Options) withDefaults() (Options, error) {
	if o.Nodes == 0 {
		o.Nodes = DefaultNodes
	}
	if o.BasePort == 0 {
		o.BasePort = DefaultBasePort
	}
	if o.Dir == "" {
		o.Dir = DefaultDir()
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	return o, o.Validate()
}

// Validate checks options as given (a zero is an error here).
func (o Options) Validate() error {
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return fmt.Errorf("--nodes %d: want 1..%d", o.Nodes, MaxNodes)
	}
	if o.BasePort < 1 || o.BasePort+o.Nodes-1 > 65535 {
		return fmt.Errorf("--base-port %d: want 1..%d for %d nodes", o.BasePort, 65535-o.Nodes+1, o.Nodes)
	}
	for _, f := range []string{o.Model, o.Draft} {
		if f == "" {
			continue
		}
		if st, err := os.Stat(f); err != nil || !strings.HasSuffix(f, ".gguf") || st.IsDir() {
			return fmt.Errorf("model %q: want a .gguf file (%v)", f, err)
		}
	}
	if o.Draft != "" && o.Model == "" {
		return errors.New("--draft needs --model")
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(strings.ToLower(o.LogLevel))); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.LogLevel)
	}
	return nil
}

// node is one agent process of the demo.
type node struct {
	idx     int
	port    int
	url     string // http://127.0.0.1:port
	api     *client.Client
	dataDir string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, set before done closes
	id      string        // from /healthz, once it answered
	master  bool
}

func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// Run starts opts.Nodes agents, waits until they form one cluster,
// prints the table of nodes on stdout, and keeps them running until ctx
// ends; then it stops them all and returns nil. It returns an error if the
// demo cannot start (busy port, a node that exits or a cluster that does
// not form within 30 s); the nodes it started are stopped by then.
// Progress and node failures go to stderr.
func Run(ctx context.Context, opts Options, stdout, stderr io.Writer) error {
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
	speed := machineSpeed(ctx, exe, opts.Dir, stderr)

	nodes := make([]*node, 0, opts.Nodes)
	exits := make(chan *node, opts.Nodes)
	fmt.Fprintf(stderr, "orrery demo: starting %d agents (data in %s, logs in %s)\n",
		opts.Nodes, opts.Dir, filepath.Join(opts.Dir, "node-<i>", "agent.log"))
	for i := range opts.Nodes {
		n := &node{
			idx:     i,
			port:    opts.BasePort + i,
			dataDir: filepath.Join(opts.Dir, fmt.Sprintf("node-%d", i)),
			done:    make(chan struct{}),
		}
		n.url = fmt.Sprintf("http://127.0.0.1:%d", n.port)
		n.api = &client.Client{BaseURL: n.url, Timeout: requestTimeout}
		n.logPath = filepath.Join(n.dataDir, "agent.log")
		if err := startNode(n, exe, env, loopbackDir, opts.LogLevel, speed, exits); err != nil {
			stopNodes(nodes, io.Discard)
			return fmt.Errorf("node %d: %w", i, err)
		}
		nodes = append(nodes, n)
	}

	ready, err := waitReady(ctx, nodes, exits, stderr)
	if err != nil {
		stopNodes(nodes, stderr)
		return err
	}
	if !ready { // stopped while starting
		fmt.Fprintln(stderr, "orrery demo: interrupted before the cluster formed")
		stopNodes(nodes, stderr)
		return nil
	}
	printTable(stdout, opts, nodes)
	if len(nodes) > 1 {
		leaveRingTrace(ctx, nodes, stdout, stderr)
	}
	if !opts.NoChat {
		m := master(nodes)
		dm := demoModel(opts)
		if id, err := chat(ctx, nodes, dm, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "orrery demo: chat: %v\n", err)
		} else {
			fmt.Fprintf(stdout, "The chat left trace %s on node %d (the master):\n  orrery trace stats %s --api %s\n  Perfetto: open %s/perfetto/%s in a browser\n  Chat yourself: curl %s/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n",
				id, m.idx, id, m.url, m.url, id, nodes[0].url, dm.id)
		}
	}
	return wait(ctx, nodes, exits, stderr)
}

// master is the node that reported itself master (node 0 if none did).
func master(nodes []*node) *node {
	for _, n := range nodes {
		if n.master {
			return n
		}
	}
	return nodes[0]
}

// leaveRingTrace leaves a real multi-node trace to look at: one ring
// benchmark, coordinated by the master, which keeps the merged trace.
func leaveRingTrace(ctx context.Context, nodes []*node, stdout, stderr io.Writer) {
	m := master(nodes)
	fmt.Fprintln(stderr, "orrery demo: running a ring benchmark (4 MiB × 3 rounds) to leave a trace …")
	if err := waitProbed(ctx, m.api, len(nodes)-1); err != nil {
		fmt.Fprintf(stderr, "orrery demo: %v; the trace's clocks may be uncorrected\n", err)
	}
	if id, err := ringTrace(ctx, m.api); err != nil {
		fmt.Fprintf(stderr, "orrery demo: ring benchmark: %v\n", err)
	} else {
		fmt.Fprintf(stdout, "\nA ring benchmark left trace %s on node %d (the master):\n  curl %s/v1/traces/%s/stats\n  Perfetto: open %s/perfetto/%s in a browser (or: orrery trace open %s --api %s)\n",
			id, m.idx, m.url, id, m.url, id, id, m.url)
	}
}

// waitProbed waits (at most 10 s) until the agent c talks to has probed
// its links to peers others, so that it knows their clock offsets.
func waitProbed(ctx context.Context, c *client.Client, peers int) error {
	ctx, cancel := context.WithTimeout(ctx, probedTimeout)
	defer cancel()
	for {
		probed := 0
		if st, err := c.Cluster(ctx); err == nil {
			for _, l := range st.Links {
				if l.Samples > 0 {
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
		case <-time.After(pollEvery):
		}
	}
}

// ringTrace runs a small ring benchmark from the agent c talks to (the
// master) and returns the id of the trace it saved.
func ringTrace(ctx context.Context, c *client.Client) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ringTimeout)
	defer cancel()
	res, err := c.RingBench(ctx, api.RingBenchRequest{SizeBytes: 4 << 20, Rounds: 3})
	if err != nil {
		return "", err
	}
	if res.TraceID == "" {
		return "", errors.New("the benchmark left no trace")
	}
	if !res.TraceSaved {
		return "", fmt.Errorf("trace %s was not saved (see the master's agent.log)", res.TraceID)
	}
	return res.TraceID, nil
}

// startNode starts one agent with its stderr (and stdout) appended to
// its agent.log. The process's exit is sent on exits.
func startNode(n *node, exe string, env []string, loopbackDir, logLevel, speed string, exits chan<- *node) error {
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
		"--log-level", logLevel,
		"--speed", speed)
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

// nodeExit describes how a node ended, with where to look.
func nodeExit(n *node) string {
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

// logTail returns the last lines of a log file, indented, or "".
func logTail(path string, lines int) string {
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

// waitReady polls the nodes until every one answers /healthz and they
// all report the same master and len(nodes) members. It returns false, nil
// if ctx ends first, and an error if a node exits or 30 s pass.
func waitReady(ctx context.Context, nodes []*node, exits <-chan *node, stderr io.Writer) (bool, error) {
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last string
	var lastAt time.Time
	for {
		ok, msg := ready(ctx, nodes)
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
			err := fmt.Errorf("%s", nodeExit(n))
			if t := logTail(n.logPath, 5); t != "" {
				err = fmt.Errorf("%w; it ends with:\n%s", err, t)
			}
			return false, err
		case <-deadline.C:
			return false, fmt.Errorf("the nodes did not form one cluster within %v (last: %s); their logs are %s",
				readyTimeout, msg, filepath.Join(filepath.Dir(nodes[0].dataDir), "node-*", "agent.log"))
		case <-tick.C:
		}
	}
}

// demoReady checks once whether the cluster has formed, and says what it
// waits for if not. It records each node's id and role.
func ready(ctx context.Context, nodes []*node) (bool, string) {
	healthy := 0
	for _, n := range nodes {
		if h, err := n.api.Health(ctx); err == nil && h.NodeID != "" {
			n.id = h.NodeID
			healthy++
		}
	}
	if healthy < len(nodes) {
		return false, fmt.Sprintf("%d of %d nodes answer /healthz", healthy, len(nodes))
	}
	masterID := ""
	for _, n := range nodes {
		st, err := n.api.Cluster(ctx)
		if err != nil {
			return false, fmt.Sprintf("node %d: %v", n.idx, err)
		}
		switch {
		case st.MasterID == "":
			return false, fmt.Sprintf("node %d has no master yet", n.idx)
		case len(st.Members) != len(nodes):
			return false, fmt.Sprintf("node %d sees %d of %d members", n.idx, len(st.Members), len(nodes))
		case masterID != "" && st.MasterID != masterID:
			return false, fmt.Sprintf("nodes disagree on the master (%s, %s)", masterID, st.MasterID)
		}
		masterID = st.MasterID
		n.master = st.IsMaster
	}
	return true, ""
}

func printTable(w io.Writer, opts Options, nodes []*node) {
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
func wait(ctx context.Context, nodes []*node, exits <-chan *node, stderr io.Writer) error {
	alive := len(nodes)
	for {
		select {
		case <-ctx.Done():
			stopNodes(nodes, stderr)
			return nil
		case n := <-exits:
			// A Ctrl-C in the terminal reaches the nodes as well as the
			// demo: give the demo's own signal a moment to arrive before
			// calling this exit a failure.
			select {
			case <-ctx.Done():
				stopNodes(nodes, stderr)
				return nil
			case <-time.After(signalGrace):
			}
			alive--
			fmt.Fprintf(stderr, "orrery demo: %s\n", nodeExit(n))
			if alive == 0 {
				return errors.New("every node has exited")
			}
			fmt.Fprintf(stderr, "orrery demo: %d of %d nodes keep running\n", alive, len(nodes))
		}
	}
}

// stopNodes SIGTERMs every node still running, waits up to 10 s for
// each and kills those still there.
func stopNodes(nodes []*node, stderr io.Writer) {
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
			case <-time.After(stopTimeout):
				n.cmd.Process.Kill()
				<-n.done
				finished <- fmt.Sprintf("node %d did not stop within %v after SIGTERM and was killed; its log is %s", n.idx, stopTimeout, n.logPath)
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
