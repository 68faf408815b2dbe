package telemetry

import (
	"context"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
)

// ifCounters are one interface's cumulative traffic counters.
type ifCounters struct {
	BytesSent, BytesRecv, PacketsSent, PacketsRecv uint64
}

// NetworkSampler lists the interfaces with their kind, addresses, MTU, link
// speed and counters, and derives MB/s from the previous sample.
type NetworkSampler struct {
	NodeID string

	prober   linkProber
	counters func() (map[string]ifCounters, error)
	prev     map[string]ifCounters
	prevT    time.Time
}

// NewNetworkSampler makes a sampler using this OS's interface readers.
func NewNetworkSampler(nodeID string) *NetworkSampler {
	return &NetworkSampler{NodeID: nodeID, prober: newLinkProber(), counters: readCounters}
}

func (*NetworkSampler) Name() string { return "network" }

func (n *NetworkSampler) Sample(ctx context.Context) (state.Event, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	now := time.Now()
	ctrs, err := n.counters()
	if err != nil {
		ctrs = nil // still report the interfaces, without counters
	}
	dt := now.Sub(n.prevT).Seconds()
	out := state.NodeNetwork{Interfaces: make([]state.NetworkInterface, 0, len(ifs)), SampledAt: now.UTC()}
	for _, ifc := range ifs {
		ni := state.NetworkInterface{
			Name:      ifc.Name,
			MTU:       ifc.MTU,
			Up:        ifc.Flags&net.FlagUp != 0,
			Addresses: []string{},
		}
		if ifc.Flags&net.FlagLoopback != 0 {
			ni.Kind = KindLoopback
		} else {
			li := n.prober.Probe(ifc.Name)
			ni.Kind, ni.SpeedMbps = li.Kind, li.SpeedMbps
		}
		if addrs, err := ifc.Addrs(); err == nil {
			for _, a := range addrs {
				ni.Addresses = append(ni.Addresses, a.String())
			}
		}
		if c, ok := ctrs[ifc.Name]; ok {
			ni.BytesSent, ni.BytesRecv, ni.PacketsSent, ni.PacketsRecv = c.BytesSent, c.BytesRecv, c.PacketsSent, c.PacketsRecv
			if p, ok := n.prev[ifc.Name]; ok && dt > 0 && c.BytesSent >= p.BytesSent && c.BytesRecv >= p.BytesRecv {
				ni.SendMBps = state.Float(float64(c.BytesSent-p.BytesSent) / dt / 1e6)
				ni.RecvMBps = state.Float(float64(c.BytesRecv-p.BytesRecv) / dt / 1e6)
			}
		}
		out.Interfaces = append(out.Interfaces, ni)
	}
	sort.Slice(out.Interfaces, func(i, j int) bool { return out.Interfaces[i].Name < out.Interfaces[j].Name })
	if ctrs != nil {
		n.prev, n.prevT = ctrs, now
	}
	return state.NodeNetworkMeasured{NodeID: n.NodeID, Network: out}, nil
}
