package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/delayproxy"
	"github.com/orrery-cluster/orrery/internal/freeport"
)

// ChoiceOptions configures Choice: "parallelism": "auto" on two agents
// that reach each other only through delay proxies, against both plans
// measured.
type ChoiceOptions struct {
	// Model is a GGUF file; Bin the orrery binary the agents run.
	Model, Bin string
	// Delays are added each way on every link between the agents (0: no
	// proxy, plain loopback).
	Delays []time.Duration
	// Cores pins agent i (and its runner) to Cores[i] with taskset; nil
	// leaves them unpinned. Runners compute on one thread.
	Cores []int
	// PP, TG and Repeat shape the measured requests (after one warmup).
	PP, TG, Repeat int
	// Dir holds the agents' data dirs (removed afterwards).
	Dir string
	// Timeout bounds one load or request.
	Timeout time.Duration
}

// ChoiceReport is what Choice measured, one entry per delay.
type ChoiceReport struct {
	Model string      `json:"model"`
	Cores []int       `json:"cores,omitempty"`
	Runs  []ChoiceRun `json:"runs"`
}

// ChoiceRun is one delay: the plan auto placed, and each plan's
// prediction beside its measured decode.
type ChoiceRun struct {
	DelayMicros float64 `json:"delayMicros"`
	// RTTMinMs are the smallest round trips the link telemetry measured,
	// A→B and B→A.
	RTTMinMs [2]float64   `json:"rttMinMs"`
	Chosen   string       `json:"chosen"`
	Plans    []ChoicePlan `json:"plans"`
	// ChosenVsOther is the chosen plan's measured decode over the other's.
	ChosenVsOther float64 `json:"chosenVsOther"`
	// DirectLinkBytes are the bytes the proxies of the agents'
	// --direct-ports forwarded (0 without proxies): the group's direct
	// links came up through them where it is not 0.
	DirectLinkBytes int64 `json:"directLinkBytes"`
}

// ChoicePlan is one plan's prediction and measurement.
type ChoicePlan struct {
	Plan                  string                `json:"plan"`
	Predicted             *runnerapi.Prediction `json:"predicted"`
	DecodeTokPerSec       float64               `json:"decodeTokPerSec"`
	PrefillTokPerSec      float64               `json:"prefillTokPerSec"`
	PredictedOverMeasured float64               `json:"predictedOverMeasured"`
	// Recalibrated is the plan's prediction after both plans ran, from
	// the all-reduce the group measured (nil: no preview).
	Recalibrated *runnerapi.Prediction `json:"recalibrated,omitempty"`
}

// Choice runs the benchmark; progress goes to log.
func Choice(ctx context.Context, o ChoiceOptions, log io.Writer) (*ChoiceReport, error) {
	rep := &ChoiceReport{Model: o.Model, Cores: o.Cores}
	for _, d := range o.Delays {
		run, err := choiceAt(ctx, o, d, log)
		if err != nil {
			return rep, fmt.Errorf("at %v each way: %w", d, err)
		}
		rep.Runs = append(rep.Runs, run)
	}
	return rep, nil
}

// choiceAgent is one agent of the pair.
type choiceAgent struct {
	cmd  *exec.Cmd
	c    *client.Client
	id   string
	done chan error
}

func (a *choiceAgent) stop() {
	if a == nil || a.cmd.Process == nil {
		return
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		a.cmd.Process.Kill()
		<-a.done
	}
}

func choiceAt(ctx context.Context, o ChoiceOptions, delay time.Duration, log io.Writer) (ChoiceRun, error) {
	run := ChoiceRun{DelayMicros: float64(delay.Microseconds())}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return run, err
	}
	root, err := os.MkdirTemp(o.Dir, "choice-")
	if err != nil {
		return run, err
	}
	defer os.RemoveAll(root)
	const modelID = "choice-model"
	dirs := [2]string{filepath.Join(root, "a"), filepath.Join(root, "b")}
	if err := os.MkdirAll(filepath.Join(dirs[0], "models"), 0o700); err != nil {
		return run, err
	}
	abs, err := filepath.Abs(o.Model)
	if err != nil {
		return run, err
	}
	if err := os.Symlink(abs, filepath.Join(dirs[0], "models", modelID+".gguf")); err != nil {
		return run, err
	}
	agents, directBytes, stop, err := startPair(ctx, o, delay, root, dirs)
	defer stop()
	if err != nil {
		return run, err
	}
	fmt.Fprintf(log, "choice: %v each way: two agents up, measuring their speed and links\n", delay)
	for _, a := range agents {
		if err := pollUntil(ctx, 30*time.Second, 200*time.Millisecond, func() (bool, error) {
			id, err := a.c.NodeID(ctx)
			a.id = id
			return err == nil && id != "", nil
		}); err != nil {
			return run, fmt.Errorf("agent did not answer: %w", err)
		}
	}
	a, b := agents[0], agents[1]
	rtt := func(st state.State, from, to string) float64 {
		for _, l := range st.NodeLinkTelemetry[from].Links {
			if l.Peer == to && l.Probes > 0 {
				return l.RTTMinMs
			}
		}
		return 0
	}
	if err := waitState(ctx, a.c, 90*time.Second, 200*time.Millisecond, func(st state.State) (bool, error) {
		for _, x := range []*choiceAgent{a, b} {
			if ni, ok := st.NodeIdentities[x.id]; !ok || ni.Speed == nil {
				return false, nil
			}
		}
		run.RTTMinMs = [2]float64{rtt(st, a.id, b.id), rtt(st, b.id, a.id)}
		return run.RTTMinMs[0] > 0 && run.RTTMinMs[1] > 0, nil
	}); err != nil {
		return run, fmt.Errorf("speeds and links: %w", err)
	}
	// A few more probes, so that the minimum round trip settles.
	time.Sleep(4 * time.Second)
	if st, err := a.c.State(ctx); err == nil {
		run.RTTMinMs = [2]float64{rtt(st, a.id, b.id), rtt(st, b.id, a.id)}
	}
	pr, err := a.c.Place(ctx, api.PlaceRequest{Model: modelID, Nodes: []string{a.id, b.id}, Parallelism: &api.Parallelism{Auto: true}})
	if err != nil {
		return run, fmt.Errorf("place auto: %w", err)
	}
	if p := pr.Instance.Prediction; p != nil {
		run.Chosen = p.Plan
	}
	fmt.Fprintf(log, "choice: %v each way (round trips %.3f/%.3f ms): auto placed %q\n", delay, run.RTTMinMs[0], run.RTTMinMs[1], run.Chosen)
	if err := a.c.DeleteInstance(ctx, pr.Instance.InstanceID); err != nil {
		return run, err
	}
	for _, par := range []string{"", "tensor"} {
		rep, err := Cluster(ctx, a.c, Options{Model: modelID, PP: []int{o.PP}, TG: []int{o.TG}, Conc: []int{1}, Warmup: 1, Repeat: o.Repeat,
			Placements: []Placement{{Nodes: []string{a.id, b.id}, Parallelism: par}}, NoSystemMetrics: true,
			MetricsInterval: time.Second, Timeout: o.Timeout, Progress: log})
		if err != nil {
			return run, err
		}
		if len(rep.Runs) == 0 {
			return run, errors.New("no runs")
		}
		cp := ChoicePlan{Plan: rep.Runs[0].Plan, Predicted: rep.Runs[0].Predicted,
			DecodeTokPerSec:  medianOf(rep.Runs, func(r Run) float64 { return r.GenTPS }),
			PrefillTokPerSec: medianOf(rep.Runs, func(r Run) float64 { return r.PromptTPS })}
		if cp.Predicted != nil && cp.DecodeTokPerSec > 0 {
			cp.PredictedOverMeasured = cp.Predicted.DecodeTokPerSec / cp.DecodeTokPerSec
		}
		run.Plans = append(run.Plans, cp)
	}
	recalibrated(ctx, a.c, modelID, run.Plans)
	run.ChosenVsOther = chosenVsOther(run)
	run.DirectLinkBytes = directBytes()
	return run, nil
}

// recalibrated takes each plan's prediction from the previews, which now
// predict from what the group measured.
func recalibrated(ctx context.Context, c *client.Client, modelID string, plans []ChoicePlan) {
	pv, err := c.Previews(ctx, modelID, nil)
	if err != nil {
		return
	}
	for i := range plans {
		for _, p := range pv.Plans {
			if p.Plan == plans[i].Plan && p.Error == "" {
				plans[i].Recalibrated = &p
			}
		}
	}
}

// chosenVsOther is the chosen plan's measured decode over the other's
// (0 when either is missing).
func chosenVsOther(run ChoiceRun) float64 {
	var chosen, other float64
	for _, p := range run.Plans {
		if p.Plan == run.Chosen {
			chosen = p.DecodeTokPerSec
		} else {
			other = p.DecodeTokPerSec
		}
	}
	if other == 0 {
		return 0
	}
	return chosen / other
}

// startPair starts the two agents (data in dirs, logs in root), each
// reaching the other only through proxies adding delay each way (none
// for 0). stop stops them and the proxies, whatever err.
//
// Behind proxies, agent i sees the other at a loopback address of its
// own, seen[i] (127.0.0.6 or .7): its proxy to the other's peer address
// listens there, and so does one proxy per port of the other's
// --direct-ports, each dialing from seen[1-i], the address the other
// sees it at. An agent takes a peer's direct-link host from its links to
// that peer, so a tensor-parallel group's direct links go through the
// proxies too, as on a real network; nothing reaches the other agent
// around them.
func startPair(ctx context.Context, o ChoiceOptions, delay time.Duration, root string, dirs [2]string) (agents [2]*choiceAgent, directBytes func() int64, stop func(), err error) {
	var proxies, direct []*delayproxy.Proxy
	directBytes = func() int64 {
		var n int64
		for _, p := range direct {
			up, down := p.Forwarded()
			n += up + down
		}
		return n
	}
	stop = func() {
		for _, a := range agents {
			a.stop()
		}
		for _, p := range proxies {
			p.Close()
		}
	}
	// Two peer addresses and two API ones (free a moment ago: another
	// process may take one before its agent binds it).
	addrs, err := freeport.Addrs(4)
	if err != nil {
		return agents, directBytes, stop, err
	}
	peers := [2]string{addrs[0], addrs[1]}
	seen := [2]string{"127.0.0.6", "127.0.0.7"}
	var ports [2][2]int
	var peerVia [2]string
	if delay > 0 {
		for i := range 2 {
			first, err := freeport.Range(directPortsPerAgent, "127.0.0.1", seen[1-i])
			if err != nil {
				return agents, directBytes, stop, err
			}
			ports[i] = [2]int{first, first + directPortsPerAgent - 1}
		}
		for i := range 2 {
			// Agent i's way to the other (1-i): its peer port, then each
			// of its direct ports.
			other, _, _ := net.SplitHostPort(peers[1-i])
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(seen[1-i])}, Timeout: 2 * time.Second}
			p, err := delayTo(delay, d, net.JoinHostPort(seen[i], "0"), peers[1-i])
			if err != nil {
				return agents, directBytes, stop, err
			}
			proxies, peerVia[i] = append(proxies, p), p.Addr().String()
			for q := ports[1-i][0]; q <= ports[1-i][1]; q++ {
				p, err := delayTo(delay, d, net.JoinHostPort(seen[i], strconv.Itoa(q)), net.JoinHostPort(other, strconv.Itoa(q)))
				if err != nil {
					return agents, directBytes, stop, err
				}
				proxies, direct = append(proxies, p), append(direct, p)
			}
		}
	}
	key := auth.GenerateKey().String()
	for i := range agents {
		addr := addrs[2+i]
		peer := peerVia[i]
		if delay == 0 {
			peer = peers[1-i] // no proxy: loopback as it is
		}
		args := []string{"agent", "--api-addr", addr, "--data-dir", dirs[i], "--peer-addr", peers[i],
			"--peer", peer, "--mdns=false", "--runner-threads", "1", "--speed", "auto"}
		if delay > 0 {
			args = append(args, "--direct-ports", fmt.Sprintf("%d-%d", ports[i][0], ports[i][1]))
		}
		cmd := exec.CommandContext(ctx, o.Bin, args...)
		if o.Cores != nil {
			cmd = exec.CommandContext(ctx, "taskset", append([]string{"-c", strconv.Itoa(o.Cores[i]), o.Bin}, args...)...)
		}
		cmd.Env = append(os.Environ(), "ORRERY_CLUSTER_KEY="+key, "HOME="+dirs[i])
		logf, err := os.Create(filepath.Join(root, fmt.Sprintf("agent-%d.log", i)))
		if err != nil {
			return agents, directBytes, stop, err
		}
		defer logf.Close() // the child has its own copy
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return agents, directBytes, stop, err
		}
		a := &choiceAgent{cmd: cmd, c: client.New("http://" + addr), done: make(chan error, 1)}
		go func() { a.done <- cmd.Wait() }()
		agents[i] = a
	}
	return agents, directBytes, stop, nil
}

// directPortsPerAgent is each agent's --direct-ports: one tensor-parallel
// rank's listener at a time, and room for a runner being replaced.
const directPortsPerAgent = 4

// delayTo is a delay proxy listening at addr, dialing up with d.
func delayTo(delay time.Duration, d *net.Dialer, addr, up string) (*delayproxy.Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return delayproxy.New(ln, delay, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", up) }), nil
}

// PrintChoice prints one row per delay and plan.
func PrintChoice(w io.Writer, r *ChoiceReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "each way\tRTT ms\tplan\tpredicted tok/s\tmeasured tok/s\tpredicted/measured\tauto\tpredicted after the runs\t")
	for _, run := range r.Runs {
		for _, p := range run.Plans {
			pred, ratio := "–", "–"
			if p.Predicted != nil {
				pred, ratio = fmt.Sprintf("%.1f", p.Predicted.DecodeTokPerSec), fmt.Sprintf("%.2f", p.PredictedOverMeasured)
			}
			mark := ""
			if p.Plan == run.Chosen {
				mark = "chosen"
			}
			after := "–"
			if r := p.Recalibrated; r != nil {
				after = fmt.Sprintf("%.1f (%.2f)", r.DecodeTokPerSec, r.DecodeTokPerSec/p.DecodeTokPerSec)
			}
			fmt.Fprintf(tw, "%.0f µs\t%.3f\t%s\t%s\t%.1f\t%s\t%s\t%s\t\n", run.DelayMicros, max(run.RTTMinMs[0], run.RTTMinMs[1]), p.Plan, pred, p.DecodeTokPerSec, ratio, mark, after)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "(predicted after the runs: the previews once the group has measured its all-reduce, and that over measured)")
	for _, run := range r.Runs {
		fmt.Fprintf(w, "%.0f µs each way: auto placed %s; measured, it decodes at %.2f× the other plan\n", run.DelayMicros, run.Chosen, run.ChosenVsOther)
		links := "linked directly"
		if run.DelayMicros > 0 {
			links = fmt.Sprintf("linked directly through the proxies (%.1f MB)", float64(run.DirectLinkBytes)/1e6)
			if run.DirectLinkBytes == 0 {
				links = "through the agents (its direct links did not come up)"
			}
		}
		for _, p := range run.Plans {
			if p.Recalibrated != nil && len(p.Recalibrated.Measured) > 0 {
				fmt.Fprintf(w, "  %s, %s: %s\n", p.Plan, links, p.Recalibrated.Measured[0])
			}
		}
	}
}
