package state

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Apply folds one event into s and returns the new state. It is pure: s and
// everything it shares are left untouched, and only the maps the event
// changes are copied. It does not touch LastEventAppliedIdx; ApplyIndexed
// does.
func Apply(s State, ev Event) State {
	switch e := ev.(type) {
	case NodeIdentityMeasured:
		s.NodeIdentities = with(s.NodeIdentities, e.NodeID, e.Identity)
		s.Topology = withTopologyNode(s.Topology, e.NodeID)
	case NodeMemoryMeasured:
		s.NodeMemory = with(s.NodeMemory, e.NodeID, e.Memory)
		s.Topology = withTopologyNode(s.Topology, e.NodeID)
	case NodeSystemMeasured:
		s.NodeSystem = with(s.NodeSystem, e.NodeID, e.System)
	case NodeDiskMeasured:
		s.NodeDisk = with(s.NodeDisk, e.NodeID, e.Disk)
	case NodeNetworkMeasured:
		s.NodeNetwork = with(s.NodeNetwork, e.NodeID, e.Network)
	case NodeLinksMeasured:
		s.NodeLinkTelemetry = with(s.NodeLinkTelemetry, e.NodeID, e.Links)
		s.Topology = withEdgesFrom(s.Topology, e.NodeID, e.Links.Links)
	case NodeModelsMeasured:
		s.NodeModels = with(s.NodeModels, e.NodeID, e.Models)
	case InstanceCreated:
		in := e.Instance
		if in.Status == "" {
			in.Status = InstanceStatusActive
		}
		s.Instances = with(s.Instances, in.InstanceID, in)
	case InstanceFailed:
		if in, ok := s.Instances[e.InstanceID]; ok && in.NodeID == e.NodeID {
			in.Status, in.Error = InstanceStatusFailed, e.Error
			s.Instances = with(s.Instances, e.InstanceID, in)
		}
	case InstanceUsed:
		// Only the node of rank 0 runs the instance's requests.
		if in, ok := s.Instances[e.InstanceID]; ok && len(in.Ranks) > 0 && in.Ranks[0].NodeID == e.NodeID {
			in.Active, in.ExpiresAt = max(e.Active, 0), e.ExpiresAt
			if e.KeepAliveMs != nil {
				in.Pinned = *e.KeepAliveMs < 0
				in.KeepAliveMs = max(*e.KeepAliveMs, 0)
			}
			if in.Pinned {
				in.ExpiresAt = nil
			}
			s.Instances = with(s.Instances, e.InstanceID, in)
		}
	case InstanceDeleted:
		s.Instances = without(s.Instances, e.InstanceID)
		s.Runners = withoutWhere(s.Runners, func(r Runner) bool { return r.InstanceID == e.InstanceID })
	case RunnerStatusChanged:
		// A late status of a deleted instance's runner must not bring
		// the runner back.
		if _, ok := s.Instances[e.Runner.InstanceID]; ok {
			s.Runners = with(s.Runners, e.Runner.RunnerID, e.Runner)
		}
	case DownloadProgress:
		s.Downloads = withDownload(s.Downloads, e.NodeID, e.Download)
	case NodeStateAsserted:
		s = applyAsserted(s, e)
	case NodeGone:
		s.NodeIdentities = without(s.NodeIdentities, e.NodeID)
		s.NodeMemory = without(s.NodeMemory, e.NodeID)
		s.NodeSystem = without(s.NodeSystem, e.NodeID)
		s.NodeDisk = without(s.NodeDisk, e.NodeID)
		s.NodeNetwork = without(s.NodeNetwork, e.NodeID)
		s.NodeLinkTelemetry = without(s.NodeLinkTelemetry, e.NodeID)
		s.NodeModels = without(s.NodeModels, e.NodeID)
		s.Downloads = withoutWhere(s.Downloads, func(d Download) bool { return d.NodeID == e.NodeID })
		// The node's own instances leave with it (it asserts them again if
		// it comes back); another owner's instance with a rank on it is
		// Failed, saying why, for its owner to replace or delete.
		s.Instances = withoutWhere(s.Instances, func(in Instance) bool { return in.NodeID == e.NodeID })
		for id, in := range s.Instances {
			if in.Status != InstanceStatusFailed && slices.ContainsFunc(in.Ranks, func(r ShardRange) bool { return r.NodeID == e.NodeID }) {
				in.Status, in.Error = InstanceStatusFailed, "node "+e.NodeID+" left the cluster"
				s.Instances = with(s.Instances, id, in)
			}
		}
		s.Runners = withoutWhere(s.Runners, func(r Runner) bool {
			_, ok := s.Instances[r.InstanceID]
			return r.NodeID == e.NodeID || !ok
		})
		s.Topology = withoutTopologyNode(s.Topology, e.NodeID)
	}
	return s
}

// ApplyIndexed applies ie, which must be the next event after s; a gap or a
// replay is an error, so that a node detects lost events instead of
// silently diverging.
func ApplyIndexed(s State, ie Indexed) (State, error) {
	if want := s.LastEventAppliedIdx + 1; ie.Idx != want {
		return s, fmt.Errorf("%w: got event %d, want %d", ErrOutOfOrder, ie.Idx, want)
	}
	s = Apply(s, ie.Event)
	s.LastEventAppliedIdx = ie.Idx
	return s, nil
}

func with[V any](m map[string]V, k string, v V) map[string]V {
	out := make(map[string]V, len(m)+1)
	maps.Copy(out, m)
	out[k] = v
	return out
}

func without[V any](m map[string]V, k string) map[string]V {
	if _, ok := m[k]; !ok {
		return m
	}
	out := make(map[string]V, len(m))
	for kk, v := range m {
		if kk != k {
			out[kk] = v
		}
	}
	return out
}

// withoutWhere drops the values drop selects (m itself when none).
func withoutWhere[V any](m map[string]V, drop func(V) bool) map[string]V {
	n := 0
	for _, v := range m {
		if drop(v) {
			n++
		}
	}
	if n == 0 {
		return m
	}
	out := make(map[string]V, len(m)-n)
	for k, v := range m {
		if !drop(v) {
			out[k] = v
		}
	}
	return out
}

// withoutTopologyNode drops a node and every edge from or to it.
func withoutTopologyNode(t Topology, id string) Topology {
	if i := slices.IndexFunc(t.Nodes, func(n TopologyNode) bool { return n.NodeID == id }); i >= 0 {
		t.Nodes = slices.Delete(slices.Clone(t.Nodes), i, i+1)
	}
	touches := func(c Connection) bool { return c.Source == id || c.Sink == id }
	if slices.ContainsFunc(t.Connections, touches) {
		t.Connections = slices.DeleteFunc(slices.Clone(t.Connections), touches)
	}
	return t
}

// withEdgesFrom replaces the edges leaving src with one per measured link
// to a node in the topology, sorted by (source, sink).
func withEdgesFrom(t Topology, src string, links []LinkTelemetry) Topology {
	known := func(id string) bool {
		return slices.ContainsFunc(t.Nodes, func(n TopologyNode) bool { return n.NodeID == id })
	}
	out := slices.DeleteFunc(slices.Clone(t.Connections), func(c Connection) bool { return c.Source == src })
	for _, l := range links {
		if !known(src) || !known(l.Peer) || l.Peer == src {
			continue
		}
		send := l.PeerSendMBps
		if send == nil {
			send = l.InterfaceSendMBps
		}
		out = append(out, Connection{Source: src, SourceInterface: l.SourceInterface, Sink: l.Peer,
			SinkAddress: l.SinkAddress, ConnectionType: l.ConnectionType, RTTMs: l.RTTEwmaMs,
			LossPct: l.LossPct, CapacityMbps: l.CapacityMbps, SendMBps: send, InterfaceSendMBps: l.InterfaceSendMBps})
	}
	slices.SortFunc(out, func(a, b Connection) int {
		if a.Source != b.Source {
			return strings.Compare(a.Source, b.Source)
		}
		return strings.Compare(a.Sink, b.Sink)
	})
	if out == nil {
		out = []Connection{}
	}
	t.Connections = out
	return t
}

func withTopologyNode(t Topology, id string) Topology {
	i, found := slices.BinarySearchFunc(t.Nodes, id, func(n TopologyNode, id string) int {
		switch {
		case n.NodeID < id:
			return -1
		case n.NodeID > id:
			return 1
		}
		return 0
	})
	if found {
		return t
	}
	t.Nodes = slices.Insert(slices.Clone(t.Nodes), i, TopologyNode{NodeID: id})
	return t
}
