package state

import (
	"fmt"
	"maps"
	"slices"
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
	case NodeGone:
		s.NodeIdentities = without(s.NodeIdentities, e.NodeID)
		s.NodeMemory = without(s.NodeMemory, e.NodeID)
		s.NodeSystem = without(s.NodeSystem, e.NodeID)
		s.NodeDisk = without(s.NodeDisk, e.NodeID)
		s.NodeNetwork = without(s.NodeNetwork, e.NodeID)
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

func withoutTopologyNode(t Topology, id string) Topology {
	i := slices.IndexFunc(t.Nodes, func(n TopologyNode) bool { return n.NodeID == id })
	if i < 0 {
		return t
	}
	t.Nodes = slices.Delete(slices.Clone(t.Nodes), i, i+1)
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
