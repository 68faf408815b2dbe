package client

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/discovery"
	"github.com/orrery-cluster/orrery/engine/gpulib"
)

// DoctorReport is everything "orrery doctor" shows, as the agent answered
// it.
type DoctorReport struct {
	API       string // the agent's base URL
	Health    api.HealthResponse
	Cluster   cluster.Status
	Discovery discovery.Report
	// GPU is the node's GPU report (nil: the agent did not give one, and
	// GPUError says why).
	GPU      *gpulib.Report
	GPUError string
}

// WriteText writes the report for a terminal. It is pure: everything it
// shows is in r.
func (r DoctorReport) WriteText(out io.Writer) error {
	var w strings.Builder
	r.writeText(&w)
	_, err := io.WriteString(out, w.String())
	return err
}

func (r DoctorReport) writeText(w *strings.Builder) {
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
	for _, l := range r.Cluster.Links {
		// A linked peer is listed before its first probe (samples 0, no
		// RTT); agents before that listed measured links only.
		if l.Samples > 0 || l.RTTEWMA > 0 {
			links[l.PeerID] = l
		}
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
			meas = fmt.Sprintf("rtt %s\toffset %s", ms(l.RTTEWMA, false), ms(l.ClockOffset, true))
			if l.ClockOffsetUncertainty > 0 {
				meas += " ± " + ms(l.ClockOffsetUncertainty, false)
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

	fmt.Fprintf(w, "Discovery  %s\n", modeText(r.Discovery.Mode))
	if r.Discovery.Mode.MDNS {
		ifs := "none"
		if len(r.Discovery.MulticastInterfaces) > 0 {
			ifs = strings.Join(r.Discovery.MulticastInterfaces, ", ")
		}
		fmt.Fprintf(w, "           multicast interfaces: %s\n", ifs)
	}
	switch {
	case r.GPU != nil:
		writeGPU(w, *r.GPU)
	case r.GPUError != "":
		fmt.Fprintf(w, "GPU        not reported: %s\n", r.GPUError)
	}
	fmt.Fprintln(w)
	if len(r.Discovery.Problems) == 0 {
		fmt.Fprintf(w, "✓ found %d %s\n", r.Discovery.PeersFound, plural(r.Discovery.PeersFound, "peer", "peers"))
		return
	}
	for _, p := range r.Discovery.Problems {
		fmt.Fprintf(w, "✗ %s\n    → %s\n", p.Message, p.Hint)
	}
}

// ms formats a duration in milliseconds with 2 decimals, signed when
// asked.
func ms(d time.Duration, signed bool) string {
	v := float64(d) / float64(time.Millisecond)
	if signed {
		return fmt.Sprintf("%+.2f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

func modeText(m discovery.Mode) string {
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
