package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/cluster"
)

func TestLinkSamplerJoinsBothEndsAndThrottles(t *testing.T) {
	speed := int64(10000)
	st := state.New()
	st.NodeNetwork = map[string]state.NodeNetwork{
		"a": {Interfaces: []state.NetworkInterface{
			{Name: "en5", Kind: "thunderbolt", Addresses: []string{"169.254.1.1/16"}, SpeedMbps: &speed, SendMBps: state.Float(40)},
			{Name: "en0", Kind: "wifi", Addresses: []string{"192.0.2.10/24"}},
		}},
		"b": {Interfaces: []state.NetworkInterface{{Name: "en3", Kind: "thunderbolt", Addresses: []string{"169.254.1.2/16"}}}},
		"c": {Interfaces: []state.NetworkInterface{{Name: "en1", Kind: "ethernet", Addresses: []string{"192.0.2.11/24"}}}},
	}
	now := time.Now()
	links := []cluster.Link{
		{PeerID: "b", LocalAddr: "169.254.1.1:5000", RemoteAddr: "169.254.1.2:52417", RTTEWMA: 2 * time.Millisecond, LastAck: now, BytesSent: 1000, Samples: 3},
		{PeerID: "c", LocalAddr: "192.0.2.10:5001", RemoteAddr: "192.0.2.11:52417", RTTEWMA: 5 * time.Millisecond, LastAck: now, Samples: 1},
		{PeerID: "dead", LocalAddr: "192.0.2.10:5002", RemoteAddr: "192.0.2.12:52417", LastAck: now.Add(-time.Minute), Samples: 9},
		// Linked, its first echoes in, but no RTT sample yet: no edge.
		{PeerID: "new", LocalAddr: "192.0.2.10:5003", RemoteAddr: "192.0.2.13:52417", LastAck: now, BytesSent: 500},
	}
	s := &LinkSampler{NodeID: "a", Links: func() []cluster.Link { return links }, State: func() state.State { return st }, FailAfter: 3 * time.Second}
	ev, err := s.Sample(context.Background())
	if err != nil || ev == nil {
		t.Fatalf("first sample: %v, %v", ev, err)
	}
	got := ev.(state.NodeLinksMeasured).Links.Links
	if len(got) != 2 {
		t.Fatalf("links = %+v; the link whose probes stopped, and the one not measured yet, must be left out", got)
	}
	tb, wifi := got[0], got[1]
	if tb.SourceInterface != "en5" || tb.SinkInterface != "en3" || tb.ConnectionType != "thunderbolt" {
		t.Errorf("thunderbolt link = %+v", tb)
	}
	if tb.CapacitySource != "os" || *tb.CapacityMbps != 10000 || *tb.InterfaceSendMBps != 40 || tb.RTTEwmaMs != 2 {
		t.Errorf("thunderbolt capacity/usage = %v %s %v", *tb.CapacityMbps, tb.CapacitySource, tb.InterfaceSendMBps)
	}
	if wifi.ConnectionType != "wifi/ethernet" || wifi.CapacitySource != "estimated" || *wifi.CapacityMbps != estimatedCapacityMbps["wifi"] {
		t.Errorf("wifi link = %+v", wifi)
	}
	if tb.PeerSendMBps != nil {
		t.Error("peer MB/s on the first sample, without a previous one")
	}

	// Nothing changed: nothing is published until the republish interval.
	if ev, _ := s.Sample(context.Background()); ev != nil {
		t.Errorf("stable links republished at once: %+v", ev)
	}
	// RTT up 50 %: published.
	links[0].RTTEWMA = 3 * time.Millisecond
	links[0].BytesSent += 2_000_000
	ev, _ = s.Sample(context.Background())
	if ev == nil {
		t.Fatal("a 50 % RTT change was not published")
	}
	tb = ev.(state.NodeLinksMeasured).Links.Links[0]
	if tb.PeerSendMBps == nil || *tb.PeerSendMBps <= 0 {
		t.Errorf("peer MB/s after 2 MB sent = %v", tb.PeerSendMBps)
	}
	// Stable again, but the republish interval has passed.
	s.pubT = s.pubT.Add(-linkRepublish)
	if ev, _ := s.Sample(context.Background()); ev == nil {
		t.Error("stable links not republished after the interval")
	}
}

func TestConnectionType(t *testing.T) {
	for _, c := range [][3]string{
		{"thunderbolt", "thunderbolt", "thunderbolt"}, {"", "ethernet", "ethernet"}, {"wifi", "", "wifi"},
		{"", "", "unknown"}, {"ethernet", "wifi", "ethernet/wifi"},
	} {
		if got := connectionType(c[0], c[1]); got != c[2] {
			t.Errorf("connectionType(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
