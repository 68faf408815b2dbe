//go:build netns

// Chaos: three real agents (-chaos.nodes), each in its own network
// namespace, joined by a bridge in another, while a client places and
// deletes instances, chats and runs traced ring benchmarks through every
// node, and the test injects faults one after another:
//
//   - partition: the victim's port on the bridge goes down (it is cut off
//     from all the others, both ways), for 4–8 s;
//   - one-way: every packet toward the victim is dropped (a tbf on its
//     bridge port whose bucket holds no packet; this kernel has no netem,
//     nftables or iptables), while its own packets still go out, 4–8 s;
//   - stall: SIGSTOP of the victim agent for 4–8 s, then SIGCONT;
//   - crash: SIGKILL of the victim agent, restarted 2 s later on the
//     same data dir (its runners die with it: parent-death signal);
//   - runner: SIGKILL of one runner process.
//
// Invariants, checked at the end, and the figures printed:
//
//   - after every fault is healed, all nodes follow one master, see all
//     the members and have the same state hash at a common index, within
//     5 s of the heal (checked after each heal, the times reported);
//   - every acknowledged placement is in the final state, or was seen
//     Failed (an event that says why); no acknowledged deletion is back;
//   - runner processes and the state's runners match: no process that no
//     runner in the state accounts for, no Ready runner without one;
//   - every request ended (answered or refused) within its bound;
//   - no agent uses more than 5 % of a core over the 10 s after the end;
//   - every trace id the client was given has a complete or a partial
//     trace on some node;
//   - a restarted agent has the same node id.
//
// Faults come in rounds of every kind once, in a random order. CI runs
// the short version (45 s of faults: about one round); `make chaos` runs
// 10 min:
//
//	go test -tags netns -count=1 -run Chaos -v ./cmd/orrery/ -chaos.duration=10m [-chaos.nodes 5]
//
// Clock steps are not injected: the namespaces share the host's clock.
// cluster/badpeer_test.go runs members with skewed clocks instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/engine/gpulib"
	"github.com/orrery-cluster/orrery/internal/netnstest"
)

var (
	chaosDuration = flag.Duration("chaos.duration", 45*time.Second, "how long the chaos test injects faults")
	chaosSeed     = flag.Int64("chaos.seed", 1, "the chaos test's random seed (faults, victims, operations)")
	chaosNodes    = flag.Int("chaos.nodes", 3, "how many agents the chaos test runs (2..9)")
)

// chaosNode is one node of the chaos cluster: its namespace, data dir
// and current agent process (replaced on restart).
type chaosNode struct {
	i                     int
	name, ns, ip, dir, id string
	model, hubDev         string
	args                  []string
	bin                   string
	env                   []string
	// gpu: its runners offload to a GPU (lavapipe here: the first node,
	// where ggml's GPU backends were built, $ORRERY_GPU_LIB).
	gpu bool

	mu    sync.Mutex // guards agent, all and down
	agent *netnsAgent
	all   []*netnsAgent // every agent process it ran, for their logs
	down  string        // the fault it is under ("" none)
}

func (n *chaosNode) start(t *testing.T) {
	a := startNetnsAgent(t, n.bin, n.name, n.ns, n.dir, n.env, n.args...)
	n.mu.Lock()
	n.agent = a
	n.all = append(n.all, a)
	n.mu.Unlock()
}

// chaosHeal is a fault's heal, from the moment it was healed until a
// little after the cluster converged again.
type chaosHeal struct {
	kind, victim string
	// fault is when the fault began; from and to are the heal's window.
	fault, from, to time.Time
}

func (n *chaosNode) cur() *netnsAgent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.agent
}

func (n *chaosNode) setDown(f string) {
	n.mu.Lock()
	n.down = f
	n.mu.Unlock()
}

// api is a client of the node's API with the given timeout.
func (n *chaosNode) api(timeout time.Duration) *client.Client {
	return &client.Client{BaseURL: "http://" + netnsAPIAddr, HTTP: netnstest.HTTPClient(n.ns, timeout)}
}

// chaosCluster builds the namespaces and starts the agents.
func chaosCluster(t *testing.T) []*chaosNode {
	netnstest.Require(t, "ip", "tc")
	bin := buildBinary(t)
	pid := os.Getpid()
	hub := fmt.Sprintf("orc-%d-h", pid)
	netnstest.Add(t, hub)
	netnstest.Cmd(t, "ip", "-n", hub, "link", "add", "br0", "type", "bridge")
	netnstest.Cmd(t, "ip", "-n", hub, "link", "set", "br0", "up")
	env := []string{"ORRERY_CLUSTER_KEY=" + auth.GenerateKey().String()}
	dir := t.TempDir()
	if *chaosNodes < 2 || *chaosNodes > 9 {
		t.Fatalf("-chaos.nodes %d: want 2..9", *chaosNodes)
	}
	var nodes []*chaosNode
	for i := range *chaosNodes {
		n := &chaosNode{i: i, name: fmt.Sprintf("n%d", i), ns: fmt.Sprintf("orc-%d-%d", pid, i),
			ip: fmt.Sprintf("10.233.0.%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("n%d", i)),
			model: fmt.Sprintf("chaos-%d", i), hubDev: fmt.Sprintf("oc%dh%d", pid, i), bin: bin, env: env}
		netnstest.Add(t, n.ns)
		dev := fmt.Sprintf("oc%dn%d", pid, i)
		netnstest.Cmd(t, "ip", "link", "add", dev, "netns", n.ns, "type", "veth", "peer", "name", n.hubDev, "netns", hub)
		netnstest.Cmd(t, "ip", "-n", n.ns, "addr", "add", n.ip+"/24", "dev", dev)
		netnstest.Cmd(t, "ip", "-n", n.ns, "link", "set", dev, "up")
		netnstest.Cmd(t, "ip", "-n", hub, "link", "set", n.hubDev, "master", "br0")
		netnstest.Cmd(t, "ip", "-n", hub, "link", "set", n.hubDev, "up")
		genModel(t, bin, n.dir, n.model, "--preset", "tiny")
		nodes = append(nodes, n)
	}
	if os.Getenv(gpulib.LibEnv) != "" {
		// The first node's runners put their blocks on the GPU, where a
		// driver's fault can kill them (chaosFault's "gpu-runner").
		nodes[0].gpu = true
	}
	for _, n := range nodes {
		n.args = []string{"--peer-addr", net.JoinHostPort(n.ip, netnsPeerPort)}
		if n.gpu {
			n.args = append(n.args, "--gpu-software")
		}
		for _, o := range nodes {
			if o != n {
				n.args = append(n.args, "--peer", net.JoinHostPort(o.ip, netnsPeerPort))
			}
		}
		n.start(t)
	}
	for _, n := range nodes {
		chaosPoll(t, nodes, 15*time.Second, "node id of "+n.name, func() (bool, string) {
			err := n.cur().getJSON("/node_id", &n.id)
			return err == nil && n.id != "", fmt.Sprint(err)
		})
	}
	chaosPoll(t, nodes, 20*time.Second, fmt.Sprintf("a converged cluster of %d", len(nodes)), func() (bool, string) { return chaosConverged(nodes) })
	return nodes
}

// chaosPoll is netnsPoll over the nodes' current agents.
func chaosPoll(t *testing.T, nodes []*chaosNode, limit time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	var agents []*netnsAgent
	for _, n := range nodes {
		agents = append(agents, n.cur())
	}
	start := time.Now()
	netnsPoll(t, agents, limit, what, cond)
	return time.Since(start)
}

// chaosConverged reports whether every node follows the same master, sees
// all the nodes and had the same state hash at the highest index all have
// applied.
func chaosConverged(nodes []*chaosNode) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	master, idx := "", int64(-1)
	for i, n := range nodes {
		st, err := n.api(time.Second).Cluster(ctx)
		if err != nil {
			return false, n.name + ": " + err.Error()
		}
		if len(st.Members) != len(nodes) || (i > 0 && st.MasterID != master) {
			return false, fmt.Sprintf("%s: master %.8s, %d members", n.name, st.MasterID, len(st.Members))
		}
		master = st.MasterID
		if i == 0 || st.LastEventAppliedIdx < idx {
			idx = st.LastEventAppliedIdx
		}
	}
	hash := ""
	for i, n := range nodes {
		h, err := n.api(time.Second).ClusterHash(ctx, idx)
		if err != nil {
			return false, fmt.Sprintf("%s: hash at %d: %v", n.name, idx, err)
		}
		if i > 0 && h.StateHash != hash {
			return false, fmt.Sprintf("hash at %d differs on %s", idx, n.name)
		}
		hash = h.StateHash
	}
	return true, ""
}

// chaosFault injects one fault into victim and heals it; it returns when
// the heal is done.
func chaosFault(t *testing.T, kind string, victim *chaosNode, hold time.Duration, rng *rand.Rand) string {
	switch kind {
	case "partition":
		victim.setDown(kind)
		netnstest.Cmd(t, "ip", "-n", hubOf(victim), "link", "set", victim.hubDev, "down")
		time.Sleep(hold)
		netnstest.Cmd(t, "ip", "-n", hubOf(victim), "link", "set", victim.hubDev, "up")
	case "one-way":
		victim.setDown(kind)
		netnstest.Cmd(t, "ip", "netns", "exec", hubOf(victim), "tc", "qdisc", "add", "dev", victim.hubDev, "root", "tbf", "rate", "8bit", "burst", "10", "limit", "10")
		time.Sleep(hold)
		netnstest.Cmd(t, "ip", "netns", "exec", hubOf(victim), "tc", "qdisc", "del", "dev", victim.hubDev, "root")
	case "stall":
		victim.setDown(kind)
		p := victim.cur().cmd.Process
		p.Signal(syscall.SIGSTOP)
		time.Sleep(hold)
		p.Signal(syscall.SIGCONT)
	case "crash":
		victim.setDown(kind)
		a := victim.cur()
		a.cmd.Process.Kill()
		<-a.done
		time.Sleep(2 * time.Second)
		victim.start(t)
	case "runner":
		pids := runnerPids(victim.cur().cmd.Process.Pid)
		if len(pids) == 0 {
			return "runner (none running)"
		}
		syscall.Kill(pids[rng.Intn(len(pids))], syscall.SIGKILL)
	case "gpu-runner":
		// A GPU driver's fault kills the process that computes on it:
		// SIGSEGV to a runner of the node whose runners offload.
		pids := runnerPids(victim.cur().cmd.Process.Pid)
		if len(pids) == 0 {
			return "gpu-runner (none running)"
		}
		syscall.Kill(pids[rng.Intn(len(pids))], syscall.SIGSEGV)
	}
	victim.setDown("")
	return kind
}

// hubOf is the hub namespace's name.
func hubOf(n *chaosNode) string { return strings.TrimSuffix(n.ns, fmt.Sprint(n.i)) + "h" }

func TestChaos(t *testing.T) {
	nodes := chaosCluster(t)
	ids := map[string]string{}
	for _, n := range nodes {
		ids[n.name] = n.id
	}
	rng := rand.New(rand.NewSource(*chaosSeed))
	w := newChaosWorkload(nodes, *chaosSeed)
	w.start()
	t.Logf("cluster of %d up (%s); faults for %v, seed %d", len(nodes), strings.Join(mapsValues(ids), ", "), *chaosDuration, *chaosSeed)

	faults := map[string]int{}
	var conv []time.Duration
	var heals []chaosHeal
	end := time.Now().Add(*chaosDuration)
	kinds := []string{"partition", "one-way", "stall", "crash", "runner"}
	if nodes[0].gpu {
		kinds = append(kinds, "gpu-runner")
	}
	var cycle []string // every kind once, in a random order, then again
	for time.Now().Before(end) {
		if len(cycle) == 0 {
			for _, i := range rng.Perm(len(kinds)) {
				cycle = append(cycle, kinds[i])
			}
		}
		kind, victim := cycle[0], nodes[rng.Intn(len(nodes))]
		cycle = cycle[1:]
		if kind == "gpu-runner" {
			victim = nodes[0]
		}
		hold := 4*time.Second + time.Duration(rng.Intn(4000))*time.Millisecond
		began := time.Now()
		got := chaosFault(t, kind, victim, hold, rng)
		faults[got]++
		healed := time.Now()
		d := chaosPoll(t, nodes, 60*time.Second, "convergence after "+got+" of "+victim.name, func() (bool, string) { return chaosConverged(nodes) })
		conv = append(conv, d)
		// A runner stopped by what the heal brought (a snapshot, a new
		// master) is stopped by then.
		heals = append(heals, chaosHeal{kind: got, victim: victim.name, fault: began, from: healed, to: time.Now().Add(2 * time.Second)})
		t.Logf("%s %-9s %s (held %v): converged %v after the heal", healed.Format("15:04:05.000"), got, victim.name, hold.Round(time.Millisecond), time.Since(healed).Round(time.Millisecond))
		time.Sleep(time.Duration(1000+rng.Intn(2000)) * time.Millisecond)
	}
	w.stop()
	chaosCheck(t, nodes, w, ids, faults, conv, heals)
}
