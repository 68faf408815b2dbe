package telemetry

import (
	"context"
	"math"
	"net/netip"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/cluster"
)

// Link sampling: measured every LinkInterval, published when something
// changed by more than linkChange (relative), and at least every
// linkRepublish even when stable.
const (
	LinkInterval  = 2 * time.Second
	linkRepublish = 10 * time.Second
	linkChange    = 0.10
)

// estimatedCapacityMbps is used when the OS does not report a link speed.
// The figures are typical, not measured: Thunderbolt IP networking
// (bridge0) carries ~20 Gbit/s in practice; Wi-Fi 6 about 400 Mbit/s.
var estimatedCapacityMbps = map[string]float64{
	KindLoopback:    100000,
	KindThunderbolt: 20000,
	KindEthernet:    1000,
	KindWiFi:        400,
	KindBridge:      10000,
	KindVirtual:     10000,
	KindVPN:         100,
	KindUnknown:     1000,
}

// LinkSampler turns the cluster node's probe statistics into link
// telemetry, joined with both ends' interface classification from state.
type LinkSampler struct {
	NodeID    string
	Links     func() []cluster.Link
	State     func() state.State
	FailAfter time.Duration

	prev      map[string]cluster.Link // by peer: counters at the last sample
	prevT     time.Time
	published []state.LinkTelemetry
	pubT      time.Time
}

func (*LinkSampler) Name() string { return "links" }

func (s *LinkSampler) Sample(ctx context.Context) (state.Event, error) {
	now := time.Now()
	st := s.State()
	own := st.NodeNetwork[s.NodeID]
	dt := now.Sub(s.prevT).Seconds()
	cur := map[string]cluster.Link{}
	out := []state.LinkTelemetry{}
	for _, l := range s.Links() {
		cur[l.PeerID] = l
		// An edge exists while probes over it succeed (from the first
		// RTT sample on; the counters above are kept from the link's start).
		if l.Samples == 0 || now.Sub(l.LastAck) > s.FailAfter || l.RemoteAddr == "" {
			continue
		}
		lt := state.LinkTelemetry{
			Peer: l.PeerID, LocalAddress: l.LocalAddr, SinkAddress: l.RemoteAddr,
			RTTMs: ms(l.RTTLast), RTTEwmaMs: ms(l.RTTEWMA), RTTMinMs: ms(l.RTTMin), JitterMs: ms(l.Jitter),
			LossPct: l.LossPct, Probes: l.Probes,
			ClockOffsetMs: ms(l.ClockOffset), ClockOffsetUncertaintyMs: ms(l.ClockOffsetUncertainty),
			BytesSent: l.BytesSent, BytesRecv: l.BytesRecv,
		}
		src, srcOK := interfaceFor(own, l.LocalAddr)
		lt.SourceInterface, lt.SourceKind = src.Name, src.Kind
		if sink, ok := interfaceFor(st.NodeNetwork[l.PeerID], l.RemoteAddr); ok {
			lt.SinkInterface, lt.SinkKind = sink.Name, sink.Kind
		}
		lt.ConnectionType = connectionType(lt.SourceKind, lt.SinkKind)
		switch {
		case srcOK && src.SpeedMbps != nil:
			lt.CapacityMbps, lt.CapacitySource = state.Float(float64(*src.SpeedMbps)), "os"
		default:
			kind := lt.SourceKind
			if kind == "" {
				kind = KindUnknown
			}
			lt.CapacityMbps, lt.CapacitySource = state.Float(estimatedCapacityMbps[kind]), "estimated"
		}
		if srcOK {
			lt.InterfaceSendMBps, lt.InterfaceRecvMBps = src.SendMBps, src.RecvMBps
		}
		if p, ok := s.prev[l.PeerID]; ok && dt > 0 && l.BytesSent >= p.BytesSent && l.BytesRecv >= p.BytesRecv {
			lt.PeerSendMBps = state.Float(float64(l.BytesSent-p.BytesSent) / dt / 1e6)
			lt.PeerRecvMBps = state.Float(float64(l.BytesRecv-p.BytesRecv) / dt / 1e6)
		}
		out = append(out, lt)
	}
	s.prev, s.prevT = cur, now
	if !s.pubT.IsZero() && now.Sub(s.pubT) < linkRepublish && !linksChanged(s.published, out) {
		return nil, nil
	}
	s.published, s.pubT = out, now
	return state.NodeLinksMeasured{NodeID: s.NodeID, Links: state.NodeLinks{Links: out, SampledAt: now.UTC()}}, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// interfaceFor finds the interface of nn that holds the IP of addr.
func interfaceFor(nn state.NodeNetwork, addr string) (state.NetworkInterface, bool) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return state.NetworkInterface{}, false
	}
	ip := ap.Addr().Unmap()
	for _, ifc := range nn.Interfaces {
		for _, a := range ifc.Addresses {
			if p, err := netip.ParsePrefix(a); err == nil && p.Addr().Unmap() == ip {
				return ifc, true
			}
		}
	}
	// An address bound to no listed interface (e.g. 127.0.0.2 on lo).
	if ip.IsLoopback() {
		for _, ifc := range nn.Interfaces {
			if ifc.Kind == KindLoopback {
				return ifc, true
			}
		}
	}
	return state.NetworkInterface{}, false
}

// connectionType names the link from both ends' classification.
func connectionType(src, sink string) string {
	switch {
	case src == "" && sink == "":
		return KindUnknown
	case src == "" || src == sink:
		return sink
	case sink == "":
		return src
	}
	return src + "/" + sink
}

// linksChanged reports whether a new sample differs enough from the last
// published one to publish it before the republish interval.
func linksChanged(old, cur []state.LinkTelemetry) bool {
	if len(old) != len(cur) {
		return true
	}
	for i := range cur {
		o, c := old[i], cur[i]
		if o.Peer != c.Peer || o.SourceInterface != c.SourceInterface || o.ConnectionType != c.ConnectionType ||
			o.SinkAddress != c.SinkAddress || o.LossPct != c.LossPct {
			return true
		}
		if relChange(o.RTTEwmaMs, c.RTTEwmaMs) || relChange(val(o.PeerSendMBps), val(c.PeerSendMBps)) ||
			relChange(val(o.InterfaceSendMBps), val(c.InterfaceSendMBps)) || relChange(val(o.InterfaceRecvMBps), val(c.InterfaceRecvMBps)) {
			return true
		}
	}
	return false
}

func val(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// relChange is true when b differs from a by more than linkChange of the
// larger, ignoring changes below a noise floor of 0.05 (ms or MB/s).
func relChange(a, b float64) bool {
	d := math.Abs(a - b)
	return d > 0.05 && d > linkChange*math.Max(math.Abs(a), math.Abs(b))
}
