package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/discovery"
)

// doctorTimeout bounds each request to the agent.
const doctorTimeout = 3 * time.Second

const doctorUsage = `Usage: orrery doctor [--api URL]

Asks a running agent how it sees the cluster and why peers may be missing:
this node, the master, each member's round-trip time and clock offset, and
the discovery problems with what to do about them. Exits 0 when discovery
reports no problem, 1 when it reports one or the agent does not answer.

Flags:
`

// doctorReport is everything the doctor shows, as the agent answered it.
type doctorReport struct {
	API       string // the agent's base URL
	Health    api.HealthResponse
	Cluster   cluster.Status
	Discovery discovery.Report
}

// runDoctor runs "orrery doctor": 0 when the agent reports no discovery
// problem, 1 when it does or does not answer, 2 on usage errors.
func runDoctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), doctorUsage)
		fs.PrintDefaults()
	}
	apiURL := fs.String("api", client.DefaultBaseURL, "base URL of the agent's local API")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	base, err := client.ParseBaseURL(*apiURL)
	if err != nil {
		fmt.Fprintf(stderr, "orrery doctor: --api %q: %v\n", *apiURL, err)
		return 2
	}

	ctx := context.Background()
	c := &client.Client{BaseURL: base, Timeout: doctorTimeout}
	r := doctorReport{API: base}
	if r.Health, err = c.Health(ctx); err != nil {
		var ae *client.Error
		if errors.As(err, &ae) {
			fmt.Fprintf(stderr, "orrery doctor: %v\n", err)
		} else {
			fmt.Fprintf(stderr, "orrery doctor: no agent answers at %s: %v — start one with `orrery agent`\n", base, err)
		}
		return 1
	}
	if r.Cluster, err = c.Cluster(ctx); err == nil {
		r.Discovery, err = c.Discovery(ctx)
	}
	if err != nil {
		fmt.Fprintf(stderr, "orrery doctor: %v\n", err)
		return 1
	}
	renderDoctor(stdout, r)
	if len(r.Discovery.Problems) > 0 {
		return 1
	}
	return 0
}

// renderDoctor writes the human-readable report. It is pure: everything it
// shows is in r.
func renderDoctor(w io.Writer, r doctorReport) {
	version := r.Health.Version
	if version == "" {
		version = "unknown version"
	}
	fmt.Fprintf(w, "Agent      %s (orrery %s, status %s)\n", r.API, version, r.Health.Status)
	id := r.Cluster.NodeID
	if id == "" {
		id = r.Health.NodeID
	}
	fmt.Fprintf(w, "Node       %s\n", id)
	switch {
	case r.Cluster.MasterID == "":
		fmt.Fprintln(w, "Master     none elected yet")
	case r.Cluster.MasterID == id:
		fmt.Fprintf(w, "Master     %s (this node)\n", r.Cluster.MasterID)
	default:
		fmt.Fprintf(w, "Master     %s\n", r.Cluster.MasterID)
	}

	fmt.Fprintf(w, "Members    %d (rtt and clock offset measured from this node; offset = member's clock − ours)\n", len(r.Cluster.Members))
	links := map[string]cluster.Link{}
	for _, l := range r.Cluster.Links { // the agent lists measured links only
		links[l.PeerID] = l
	}
	var table strings.Builder // padded by tabwriter, then trailing spaces cut
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	for _, m := range r.Cluster.Members {
		role := "worker"
		if m.NodeID == r.Cluster.MasterID {
			role = "master"
		}
		meas := "no probe yet"
		if m.Self || m.NodeID == id {
			role, meas = role+", this node", ""
		} else if l, ok := links[m.NodeID]; ok {
			meas = fmt.Sprintf("rtt %s\toffset %s", doctorMs(l.RTTEWMA, false), doctorMs(l.ClockOffset, true))
			if l.ClockOffsetUncertainty > 0 {
				meas += " ± " + doctorMs(l.ClockOffsetUncertainty, false)
			}
			if l.LossPct > 0 {
				meas += fmt.Sprintf("\tloss %.0f%%", l.LossPct)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", m.NodeID, role, meas)
	}
	tw.Flush()
	for line := range strings.Lines(table.String()) {
		fmt.Fprintln(w, strings.TrimRight(line, " \n"))
	}

	fmt.Fprintf(w, "Discovery  %s\n", doctorMode(r.Discovery.Mode))
	if r.Discovery.Mode.MDNS {
		ifs := "none"
		if len(r.Discovery.MulticastInterfaces) > 0 {
			ifs = strings.Join(r.Discovery.MulticastInterfaces, ", ")
		}
		fmt.Fprintf(w, "           multicast interfaces: %s\n", ifs)
	}
	fmt.Fprintln(w)
	if len(r.Discovery.Problems) == 0 {
		fmt.Fprintf(w, "✓ found %d %s\n", r.Discovery.PeersFound, doctorPlural(r.Discovery.PeersFound, "peer", "peers"))
		return
	}
	for _, p := range r.Discovery.Problems {
		fmt.Fprintf(w, "✗ %s\n    → %s\n", p.Message, p.Hint)
	}
}

// doctorMs formats a duration in milliseconds with 2 decimals, signed when
// asked.
func doctorMs(d time.Duration, signed bool) string {
	ms := float64(d) / float64(time.Millisecond)
	if signed {
		return fmt.Sprintf("%+.2f ms", ms)
	}
	return fmt.Sprintf("%.2f ms", ms)
}

func doctorMode(m discovery.Mode) string {
	var on []string
	if m.MDNS {
		on = append(on, "mDNS")
	}
	if m.Loopback {
		on = append(on, "loopback (agents on this machine)")
	}
	if m.Static {
		on = append(on, "static peers")
	}
	if len(on) == 0 {
		return "no source enabled"
	}
	return strings.Join(on, ", ")
}

func doctorPlural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
