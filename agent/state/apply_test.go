package state

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/ident"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func sampleEvents(node string) []Event {
	return []Event{
		NodeIdentityMeasured{NodeID: node, Identity: NodeIdentity{NodeID: node, FriendlyName: "studio", ChipID: "Apple M2 Ultra", RAMTotal: Bytes(192 << 30), PerfCores: Int(16), EffCores: Int(8)}},
		NodeMemoryMeasured{NodeID: node, Memory: NodeMemory{RAMTotal: Bytes(192 << 30), RAMAvailable: Bytes(100 << 30), SwapTotal: Bytes(0), SwapAvailable: Bytes(0), SampledAt: t0}},
		NodeSystemMeasured{NodeID: node, System: NodeSystem{CPUUsage: Float(0.25), GPUUsage: Float(0.5), SampledAt: t0}},
		NodeDiskMeasured{NodeID: node, Disk: NodeDisk{Path: "/m", Total: Bytes(1000), Available: Bytes(400), SampledAt: t0}},
		NodeNetworkMeasured{NodeID: node, Network: NodeNetwork{Interfaces: []NetworkInterface{{Name: "en0", Kind: "wifi", MTU: 1500}}, SampledAt: t0}},
		NodeGone{NodeID: "gone-" + node},
		NodeLinksMeasured{NodeID: node, Links: NodeLinks{Links: []LinkTelemetry{{Peer: "peer-" + node, SourceInterface: "en0", RTTEwmaMs: 1.5, ConnectionType: "thunderbolt"}}, SampledAt: t0}},
		NodeModelsMeasured{NodeID: node, Models: NodeModels{Models: []ModelInfo{{ID: "demo", Source: "orrery", Size: Bytes(30 << 20), Arch: "llama", Layers: 8}}, SampledAt: t0}},
		InstanceCreated{NodeID: node, Instance: Instance{InstanceID: "inst-" + node, ModelID: "demo", NodeID: node,
			Ranks: []ShardRange{{Rank: 0, NodeID: node, FirstLayer: 0, LastLayer: 8}}, CreatedAt: t0}},
		RunnerStatusChanged{NodeID: node, Runner: Runner{RunnerID: "inst-" + node + "-0", InstanceID: "inst-" + node, NodeID: node,
			Status: RunnerLoading, LayersLoaded: 3, TotalLayers: 8, Since: t0}},
		InstanceDeleted{NodeID: node, InstanceID: "inst-" + node},
		InstanceFailed{NodeID: node, InstanceID: "inst-" + node, Error: "rank 1 failed"},
		InstanceUsed{NodeID: node, InstanceID: "inst-" + node, Active: 0, ExpiresAt: &t0},
		NodeStateAsserted{NodeID: node, Identity: &NodeIdentity{NodeID: node, FriendlyName: "asserted"}},
		DownloadProgress{NodeID: node, Download: Download{ID: "dl-" + node, Ref: "hf.co/org/repo", Status: DownloadRunning, Bytes: 5, Size: 10}},
	}
}

func TestApplyInstanceUsed(t *testing.T) {
	evs := sampleEvents("n1")
	s := Apply(New(), evs[8])
	t1 := time.Date(2026, 12, 4, 10, 5, 0, 0, time.UTC)
	busy := Apply(s, InstanceUsed{NodeID: "n1", InstanceID: "inst-n1", Active: 2})
	if in := busy.Instances["inst-n1"]; in.Active != 2 || in.ExpiresAt != nil || in.Pinned {
		t.Fatalf("busy: %+v", in)
	}
	idle := Apply(busy, InstanceUsed{NodeID: "n1", InstanceID: "inst-n1", ExpiresAt: &t1, KeepAliveMs: ptr(int64(60000))})
	if in := idle.Instances["inst-n1"]; in.Active != 0 || in.ExpiresAt == nil || !in.ExpiresAt.Equal(t1) || in.KeepAliveMs != 60000 {
		t.Fatalf("idle: %+v", in)
	}
	pinned := Apply(idle, InstanceUsed{NodeID: "n1", InstanceID: "inst-n1", ExpiresAt: &t1, KeepAliveMs: ptr(int64(-1))})
	if in := pinned.Instances["inst-n1"]; !in.Pinned || in.ExpiresAt != nil || in.KeepAliveMs != 0 {
		t.Fatalf("pinned: %+v", in)
	}
	// Only rank 0's node runs the requests; another node's report is
	// ignored, as is one for an instance that is gone.
	if other := Apply(s, InstanceUsed{NodeID: "n2", InstanceID: "inst-n1", Active: 5}); other.Instances["inst-n1"].Active != 0 {
		t.Fatal("a node other than rank 0's reported use")
	}
	if gone := Apply(New(), InstanceUsed{NodeID: "n1", InstanceID: "inst-n1", Active: 1}); len(gone.Instances) != 0 {
		t.Fatal("use of a missing instance created it")
	}
}

func ptr[T any](v T) *T { return &v }

func TestApplyEveryEventType(t *testing.T) {
	evs := sampleEvents("n1")
	seen := map[string]bool{}
	for _, ev := range evs {
		seen[ev.Type()] = true
	}
	for _, typ := range EventTypes() {
		if !seen[typ] {
			t.Errorf("event type %s has no case in this table", typ)
		}
	}
	tests := []struct {
		ev    Event
		check func(t *testing.T, s State)
	}{
		{evs[0], func(t *testing.T, s State) {
			if got := s.NodeIdentities["n1"].FriendlyName; got != "studio" {
				t.Errorf("friendly name = %q", got)
			}
			if len(s.Topology.Nodes) != 1 || s.Topology.Nodes[0].NodeID != "n1" {
				t.Errorf("topology = %+v, want node n1", s.Topology.Nodes)
			}
		}},
		{evs[1], func(t *testing.T, s State) {
			if got := s.NodeMemory["n1"].RAMAvailable.InBytes; got != 100<<30 {
				t.Errorf("ramAvailable = %d", got)
			}
			if len(s.Topology.Nodes) != 1 {
				t.Errorf("memory sample should add the node to the topology: %+v", s.Topology.Nodes)
			}
		}},
		{evs[2], func(t *testing.T, s State) {
			sys := s.NodeSystem["n1"]
			if sys.GPUUsage == nil || *sys.GPUUsage != 0.5 || sys.Temp != nil {
				t.Errorf("system = %+v", sys)
			}
		}},
		{evs[3], func(t *testing.T, s State) {
			if got := s.NodeDisk["n1"].Available.InBytes; got != 400 {
				t.Errorf("disk available = %d", got)
			}
		}},
		{evs[4], func(t *testing.T, s State) {
			if got := s.NodeNetwork["n1"].Interfaces; len(got) != 1 || got[0].Kind != "wifi" {
				t.Errorf("interfaces = %+v", got)
			}
		}},
	}
	tests = append(tests, struct {
		ev    Event
		check func(t *testing.T, s State)
	}{evs[6], func(t *testing.T, s State) {
		if got := s.NodeLinkTelemetry["n1"].Links; len(got) != 1 || got[0].RTTEwmaMs != 1.5 {
			t.Errorf("link telemetry = %+v", got)
		}
		if len(s.Topology.Connections) != 0 {
			t.Errorf("an edge to or from a node not in the topology: %+v", s.Topology.Connections)
		}
	}})
	tests = append(tests, struct {
		ev    Event
		check func(t *testing.T, s State)
	}{evs[5], func(t *testing.T, s State) {
		if len(s.NodeMemory) != 0 || len(s.Topology.Nodes) != 0 {
			t.Errorf("NodeGone of an unknown node changed the state: %+v", s)
		}
	}})
	type tcase = struct {
		ev    Event
		check func(t *testing.T, s State)
	}
	tests = append(tests, tcase{evs[7], func(t *testing.T, s State) {
		if m := s.NodeModels["n1"].Models; len(m) != 1 || m[0].ID != "demo" || m[0].Layers != 8 {
			t.Errorf("models = %+v", m)
		}
	}}, tcase{evs[8], func(t *testing.T, s State) {
		if in := s.Instances["inst-n1"]; in.ModelID != "demo" || len(in.Ranks) != 1 {
			t.Errorf("instance = %+v", in)
		}
	}}, tcase{evs[9], func(t *testing.T, s State) {
		if len(s.Runners) != 0 {
			t.Errorf("a runner of an unknown instance entered the state: %+v", s.Runners)
		}
	}}, tcase{evs[10], func(t *testing.T, s State) {
		if len(s.Instances) != 0 {
			t.Errorf("instances = %+v", s.Instances)
		}
	}}, tcase{evs[11], func(t *testing.T, s State) {
		if len(s.Instances) != 0 {
			t.Errorf("a failure of an unknown instance created one: %+v", s.Instances)
		}
	}})
	for _, tc := range tests {
		t.Run(tc.ev.Type(), func(t *testing.T) {
			before := New()
			snapshot, _ := json.Marshal(before)
			after := Apply(before, tc.ev)
			tc.check(t, after)
			if again, _ := json.Marshal(before); string(again) != string(snapshot) {
				t.Errorf("Apply mutated its input:\nbefore %s\nafter  %s", snapshot, again)
			}
		})
	}
}

// An instance's runners live and die with it, and with its nodes.
func TestApplyInstanceLifecycle(t *testing.T) {
	evs := sampleEvents("n1")
	s := New()
	for _, ev := range evs[7:10] {
		s = Apply(s, ev)
	}
	if r := s.Runners["inst-n1-0"]; r.Status != RunnerLoading || r.LayersLoaded != 3 {
		t.Fatalf("runner = %+v", r)
	}
	s = Apply(s, RunnerStatusChanged{NodeID: "n1", Runner: Runner{RunnerID: "inst-n1-0", InstanceID: "inst-n1", NodeID: "n1", Status: RunnerReady}})
	if s.Runners["inst-n1-0"].Status != RunnerReady {
		t.Fatalf("runner = %+v", s.Runners["inst-n1-0"])
	}
	if s.Instances["inst-n1"].Status != InstanceStatusActive {
		t.Fatalf("new instance status %q", s.Instances["inst-n1"].Status)
	}
	failed := Apply(s, evs[11])
	if in := failed.Instances["inst-n1"]; in.Status != InstanceStatusFailed || in.Error != "rank 1 failed" {
		t.Fatalf("after InstanceFailed: %+v", in)
	}
	if other := Apply(s, InstanceFailed{NodeID: "n2", InstanceID: "inst-n1", Error: "x"}); other.Instances["inst-n1"].Status != InstanceStatusActive {
		t.Fatal("a node other than the owner failed the instance")
	}
	deleted := Apply(s, evs[10])
	if len(deleted.Runners) != 0 || len(deleted.Instances) != 0 {
		t.Fatalf("after delete: %+v %+v", deleted.Instances, deleted.Runners)
	}
	gone := Apply(s, NodeGone{NodeID: "n1"})
	if len(gone.Runners) != 0 || len(gone.Instances) != 0 || len(gone.NodeModels) != 0 {
		t.Fatalf("after NodeGone: %+v %+v %+v", gone.Instances, gone.Runners, gone.NodeModels)
	}
	if other := Apply(s, NodeGone{NodeID: "n2"}); len(other.Instances) != 1 || len(other.Runners) != 1 {
		t.Fatalf("NodeGone of another node dropped n1's instance")
	}
	// n1's instance with a rank on n2: n2 leaving fails it, saying why,
	// and drops n2's runner; n1's own runner stays for its owner to stop.
	two := s.Instances["inst-n1"]
	two.Ranks = append(two.Ranks, ShardRange{Rank: 1, NodeID: "n2", FirstLayer: 4, LastLayer: 8})
	s2 := Apply(s, InstanceCreated{NodeID: "n1", Instance: two})
	s2 = Apply(s2, RunnerStatusChanged{NodeID: "n2", Runner: Runner{RunnerID: "inst-n1-1", InstanceID: "inst-n1", NodeID: "n2", Status: RunnerReady}})
	left := Apply(s2, NodeGone{NodeID: "n2"})
	if in := left.Instances["inst-n1"]; in.Status != InstanceStatusFailed || in.Error != "node n2 left the cluster" || len(left.Runners) != 1 {
		t.Fatalf("after the rank's node left: %+v, runners %+v", in, left.Runners)
	}
	if len(s.Instances) != 1 || len(s.Runners) != 1 {
		t.Fatal("Apply mutated its input")
	}
}

func TestApplyLatestSampleWinsAndNodesStaySeparate(t *testing.T) {
	s := New()
	for i, node := range []string{"b", "a", "b"} {
		s = Apply(s, NodeMemoryMeasured{NodeID: node, Memory: NodeMemory{RAMAvailable: Bytes(uint64(i))}})
	}
	if got := s.NodeMemory["b"].RAMAvailable.InBytes; got != 2 {
		t.Errorf("b ramAvailable = %d, want latest (2)", got)
	}
	if got := s.NodeMemory["a"].RAMAvailable.InBytes; got != 1 {
		t.Errorf("a ramAvailable = %d, want 1", got)
	}
	want := []TopologyNode{{"a"}, {"b"}}
	if !reflect.DeepEqual(s.Topology.Nodes, want) {
		t.Errorf("topology nodes = %+v, want sorted %+v", s.Topology.Nodes, want)
	}
}

func TestNodeGoneRemovesEverything(t *testing.T) {
	s := New()
	for _, ev := range append(sampleEvents("a"), sampleEvents("b")...) {
		s = Apply(s, ev)
	}
	before, _ := json.Marshal(s)
	after := Apply(s, NodeGone{NodeID: "a"})
	for name, n := range map[string]int{"identities": len(after.NodeIdentities), "memory": len(after.NodeMemory),
		"system": len(after.NodeSystem), "disk": len(after.NodeDisk), "network": len(after.NodeNetwork), "topology": len(after.Topology.Nodes)} {
		if n != 1 {
			t.Errorf("%s has %d nodes after a is gone, want 1 (b)", name, n)
		}
	}
	if _, ok := after.NodeMemory["b"]; !ok || after.Topology.Nodes[0].NodeID != "b" {
		t.Error("b was removed too")
	}
	if again, _ := json.Marshal(s); string(again) != string(before) {
		t.Error("NodeGone mutated its input")
	}
	if Hash(after) == Hash(s) {
		t.Error("hash did not change with the state")
	}
}

func TestEdgesFollowLinkSamples(t *testing.T) {
	s := New()
	for _, n := range []string{"a", "b", "c"} {
		s = Apply(s, NodeMemoryMeasured{NodeID: n})
	}
	link := func(peer string, rtt float64) LinkTelemetry {
		return LinkTelemetry{Peer: peer, SourceInterface: "en5", SinkAddress: "10.0.0.2:1", ConnectionType: "thunderbolt", RTTEwmaMs: rtt, InterfaceSendMBps: Float(12)}
	}
	s = Apply(s, NodeLinksMeasured{NodeID: "a", Links: NodeLinks{Links: []LinkTelemetry{link("c", 2), link("b", 1), link("zz", 1)}}})
	s = Apply(s, NodeLinksMeasured{NodeID: "b", Links: NodeLinks{Links: []LinkTelemetry{link("a", 3)}}})
	edges := func(s State) (out []string) {
		for _, c := range s.Topology.Connections {
			out = append(out, c.Source+">"+c.Sink)
		}
		return out
	}
	if got := edges(s); !reflect.DeepEqual(got, []string{"a>b", "a>c", "b>a"}) {
		t.Fatalf("edges = %v (an edge to unknown zz must not appear)", got)
	}
	if c := s.Topology.Connections[0]; c.SourceInterface != "en5" || c.ConnectionType != "thunderbolt" || c.RTTMs != 1 || *c.SendMBps != 12 {
		t.Errorf("edge a>b = %+v", c)
	}
	// With the per-peer rate known, the edge carries it (what crosses this
	// edge); the interface's, shared with other peers, stays beside it.
	withPeer := link("b", 1)
	withPeer.PeerSendMBps = Float(3)
	s2 := Apply(s, NodeLinksMeasured{NodeID: "a", Links: NodeLinks{Links: []LinkTelemetry{withPeer}}})
	if c := s2.Topology.Connections[0]; *c.SendMBps != 3 || *c.InterfaceSendMBps != 12 {
		t.Errorf("edge a>b with the peer's rate = send %v, interface %v; want 3 and 12", *c.SendMBps, *c.InterfaceSendMBps)
	}
	// A new sample from a replaces a's edges: the link to c stopped answering.
	s = Apply(s, NodeLinksMeasured{NodeID: "a", Links: NodeLinks{Links: []LinkTelemetry{link("b", 1)}}})
	if got := edges(s); !reflect.DeepEqual(got, []string{"a>b", "b>a"}) {
		t.Errorf("after a's new sample: %v", got)
	}
	// b leaves: every edge from or to it goes.
	s = Apply(s, NodeGone{NodeID: "b"})
	if got := edges(s); len(got) != 0 {
		t.Errorf("edges after b is gone: %v", got)
	}
	if _, ok := s.NodeLinkTelemetry["b"]; ok {
		t.Error("b's link telemetry survived NodeGone")
	}
}

func TestHashStableAcrossJSONRoundTrip(t *testing.T) {
	s := New()
	for _, ev := range sampleEvents("a") {
		s = Apply(s, ev)
	}
	s.LastEventAppliedIdx = 5
	b, _ := json.Marshal(s)
	back := New()
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if Hash(back) != Hash(s) {
		t.Errorf("a snapshot restored from JSON hashes differently:\n%s", b)
	}
}

func TestApplyIndexedRefusesGapsAndReplays(t *testing.T) {
	s := New()
	ev := sampleEvents("n1")[1]
	s, err := ApplyIndexed(s, Indexed{Idx: 0, Event: ev})
	if err != nil || s.LastEventAppliedIdx != 0 {
		t.Fatalf("first event: idx=%d err=%v", s.LastEventAppliedIdx, err)
	}
	for _, idx := range []int64{0, 2, -1} {
		got, err := ApplyIndexed(s, Indexed{Idx: idx, Event: ev})
		if !errors.Is(err, ErrOutOfOrder) {
			t.Errorf("idx %d: err = %v, want ErrOutOfOrder", idx, err)
		}
		if got.LastEventAppliedIdx != 0 {
			t.Errorf("idx %d: state advanced to %d", idx, got.LastEventAppliedIdx)
		}
	}
}

// TestUnknownIsAbsent: a value the OS does not report is left out of the
// JSON (exo's harness reads data.get(k, 0.0), which a null breaks), and a
// real 0 stays 0.
func TestUnknownIsAbsent(t *testing.T) {
	s := Apply(New(), NodeSystemMeasured{NodeID: "n", System: NodeSystem{CPUUsage: Float(0)}})
	b, err := json.Marshal(s.NodeSystem["n"])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"gpuUsage", "temp", "sysPower", "pcpuUsage", "ecpuUsage"} {
		if v, ok := m[k]; ok {
			t.Errorf("%s = %v, want the key absent", k, v)
		}
	}
	if m["cpuUsage"] != 0.0 {
		t.Errorf("cpuUsage = %v, want a real 0", m["cpuUsage"])
	}
}

func TestIndexedJSONRoundTrip(t *testing.T) {
	for i, ev := range sampleEvents("node-1") {
		in := Indexed{Idx: int64(i), Event: ev}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var wire map[string]json.RawMessage
		json.Unmarshal(b, &wire)
		if string(wire["type"]) != `"`+ev.Type()+`"` {
			t.Errorf("type field = %s", wire["type"])
		}
		var out Indexed
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("round trip:\n in %#v\nout %#v", in, out)
		}
	}
}

func TestIndexedUnmarshalErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"idx":1,"type":"Nope","event":{}}`, "unknown event type"},
		{`{"idx":-1,"type":"NodeMemoryMeasured","event":{"nodeId":"a"}}`, "negative idx"},
		{`{"idx":1,"type":"NodeMemoryMeasured"}`, "missing"},
		{`{"idx":1,"type":"NodeMemoryMeasured","event":{"nodeId":""}}`, "empty node id"},
		{`{"idx":1,"type":"NodeMemoryMeasured","event":{"nodeId":"../x"}}`, "not [A-Za-z0-9_-]"},
		{`{"idx":1,"type":"NodeMemoryMeasured","event":{"nodeId":"a","memory":{"ramTotal":{"inBytes":-5}}}}`, "decode NodeMemoryMeasured"},
		{`[1,2]`, "indexed event"},
		// Ids besides the node's: an instance id names a runner's log.
		{`{"idx":1,"type":"InstanceCreated","event":{"nodeId":"a","instance":{"instanceId":"x/../../../etc/y","nodeId":"a","ranks":[{"nodeId":"a"}]}}}`, "instance id"},
		{`{"idx":1,"type":"InstanceCreated","event":{"nodeId":"a","instance":{"instanceId":"i","nodeId":"a","ranks":[{"nodeId":"a"},{"nodeId":"b c"}]}}}`, "instance i, rank 1"},
		{`{"idx":1,"type":"InstanceCreated","event":{"nodeId":"a","instance":{"instanceId":"i","ranks":[{"nodeId":"a"}]}}}`, "owner"},
		{`{"idx":1,"type":"InstanceDeleted","event":{"nodeId":"a","instanceId":".."}}`, "instance id"},
		{`{"idx":1,"type":"InstanceFailed","event":{"nodeId":"a","instanceId":""}}`, "empty instance id"},
		{`{"idx":1,"type":"InstanceUsed","event":{"nodeId":"a","instanceId":"a/b"}}`, "instance id"},
		{`{"idx":1,"type":"RunnerStatusChanged","event":{"nodeId":"a","runner":{"runnerId":"r","instanceId":"i","nodeId":"/"}}}`, "node id"},
		{`{"idx":1,"type":"NodeStateAsserted","event":{"nodeId":"a","instances":[{"instanceId":"i/","nodeId":"a"}],"runners":[]}}`, "instance id"},
		{`{"idx":1,"type":"NodeStateAsserted","event":{"nodeId":"a","instances":[],"runners":[{"runnerId":"r","instanceId":"..","nodeId":"a"}]}}`, "runner \"r\""},
	} {
		var ie Indexed
		err := json.Unmarshal([]byte(tc.in), &ie)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.in, err, tc.want)
		}
	}
}

// Validate refuses what DecodeEvent would: a local event with a bad id
// never enters the log, to be refused by every other node.
func TestValidateChecksEveryID(t *testing.T) {
	ok := Instance{InstanceID: "inst-1", NodeID: "a", Ranks: []ShardRange{{NodeID: "a"}, {Rank: 1, NodeID: "b"}}}
	if err := Validate(InstanceCreated{NodeID: "a", Instance: ok}); err != nil {
		t.Fatalf("a valid instance: %v", err)
	}
	bad := ok
	bad.Ranks = []ShardRange{{NodeID: "a"}, {Rank: 1, NodeID: "../b"}}
	for _, ev := range []Event{
		InstanceCreated{NodeID: "a", Instance: Instance{InstanceID: "../x", NodeID: "a"}},
		InstanceCreated{NodeID: "a", Instance: bad},
		InstanceDeleted{NodeID: "a", InstanceID: "x y"},
		RunnerStatusChanged{NodeID: "a", Runner: Runner{RunnerID: "r", InstanceID: "i", NodeID: ""}},
		NodeStateAsserted{NodeID: "a", Instances: []Instance{ok, bad}},
	} {
		if err := Validate(ev); err == nil || !errors.Is(err, ident.ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want an invalid id", ev, err)
		}
	}
}

// A snapshot from the wire is checked as its events would have been.
func TestStateCheckIDs(t *testing.T) {
	s := Apply(New(), InstanceCreated{NodeID: "a", Instance: Instance{InstanceID: "i", NodeID: "a", Ranks: []ShardRange{{NodeID: "a"}}}})
	s = Apply(s, RunnerStatusChanged{NodeID: "a", Runner: Runner{RunnerID: "i-0", InstanceID: "i", NodeID: "a"}})
	s = Apply(s, NodeMemoryMeasured{NodeID: "a"})
	if err := s.CheckIDs(); err != nil {
		t.Fatalf("a valid state: %v", err)
	}
	for name, mod := range map[string]func(s *State){
		"node key":     func(s *State) { s.NodeMemory = with(s.NodeMemory, "a/..", NodeMemory{}) },
		"instance key": func(s *State) { s.Instances = with(s.Instances, "j", s.Instances["i"]) },
		"instance id":  func(s *State) { s.Instances = map[string]Instance{"..": {InstanceID: "..", NodeID: "a"}} },
		"rank node": func(s *State) {
			s.Instances = map[string]Instance{"i": {InstanceID: "i", NodeID: "a", Ranks: []ShardRange{{NodeID: "."}}}}
		},
		"runner instance": func(s *State) {
			s.Runners = with(s.Runners, "x", Runner{RunnerID: "x", InstanceID: "/tmp", NodeID: "a"})
		},
		"runner node (nil)": func(s *State) { s.Runners = with(s.Runners, "x", Runner{RunnerID: "x", InstanceID: "i"}) },
	} {
		c := s
		mod(&c)
		if err := c.CheckIDs(); err == nil {
			t.Errorf("%s: CheckIDs accepted %+v", name, c)
		}
	}
}

// An instance whose tensor-parallel groups do not tile its ranks is
// refused: every node's supervisor indexes the ranks by the shape.
func TestValidateChecksTheShape(t *testing.T) {
	four := []ShardRange{{NodeID: "a"}, {Rank: 1, NodeID: "b"}, {Rank: 2, NodeID: "c"}, {Rank: 3, NodeID: "d"}}
	for _, c := range []struct {
		tensor int
		ranks  []ShardRange
		ok     bool
	}{
		{0, four, true}, {1, four, true}, {2, four, true}, {4, four, true},
		{3, four, false}, {-1, four, false}, {8, four, false}, {32, append(four, four...), false},
	} {
		in := Instance{InstanceID: "inst-1", NodeID: "a", Ranks: c.ranks, Tensor: c.tensor}
		if err := Validate(InstanceCreated{NodeID: "a", Instance: in}); (err == nil) != c.ok {
			t.Errorf("%d ranks, tensor %d: %v, want ok %v", len(c.ranks), c.tensor, err, c.ok)
		}
	}
}
