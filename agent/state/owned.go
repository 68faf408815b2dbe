package state

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Ownership. Every fact in the state has one owner, the node it is
// about: its identity and measurements, the instances it placed, the
// runners it runs. The owner keeps its own record of them (Owned, folded
// from the events it publishes) and reconciles the replicated state with
// it: whatever a master change, a partition or a snapshot dropped, the
// owner asserts again (NodeStateAsserted). So a write acknowledged by its
// owner survives any master, and a deletion stays a deletion.

// NodeStateAsserted is everything one node owns, as the node knows it.
// Applying it replaces the node's part of the state: its measurements
// (those present), its instances (the usage counts of an instance already
// in the state are kept, as its rank 0's node reported them; a Failed
// status stays Failed) and its runners (those of instances in the state).
type NodeStateAsserted struct {
	NodeID    string        `json:"nodeId"`
	Identity  *NodeIdentity `json:"identity,omitempty"`
	Memory    *NodeMemory   `json:"memory,omitempty"`
	System    *NodeSystem   `json:"system,omitempty"`
	Disk      *NodeDisk     `json:"disk,omitempty"`
	Network   *NodeNetwork  `json:"network,omitempty"`
	Links     *NodeLinks    `json:"links,omitempty"`
	Models    *NodeModels   `json:"models,omitempty"`
	Instances []Instance    `json:"instances"`
	Runners   []Runner      `json:"runners"`
	Downloads []Download    `json:"downloads,omitempty"`
}

func (NodeStateAsserted) Type() string   { return "NodeStateAsserted" }
func (e NodeStateAsserted) Node() string { return e.NodeID }

// applyAsserted folds a NodeStateAsserted into s (see its doc).
func applyAsserted(s State, e NodeStateAsserted) State {
	n := e.NodeID
	if e.Identity != nil {
		s = Apply(s, NodeIdentityMeasured{NodeID: n, Identity: *e.Identity})
	}
	if e.Memory != nil {
		s = Apply(s, NodeMemoryMeasured{NodeID: n, Memory: *e.Memory})
	}
	if e.System != nil {
		s = Apply(s, NodeSystemMeasured{NodeID: n, System: *e.System})
	}
	if e.Disk != nil {
		s = Apply(s, NodeDiskMeasured{NodeID: n, Disk: *e.Disk})
	}
	if e.Network != nil {
		s = Apply(s, NodeNetworkMeasured{NodeID: n, Network: *e.Network})
	}
	if e.Links != nil {
		s = Apply(s, NodeLinksMeasured{NodeID: n, Links: *e.Links})
	}
	if e.Models != nil {
		s = Apply(s, NodeModelsMeasured{NodeID: n, Models: *e.Models})
	}
	asserted := map[string]Instance{}
	for _, in := range e.Instances {
		if in.NodeID == n {
			asserted[in.InstanceID] = in
		}
	}
	for id, in := range s.Instances {
		if _, ok := asserted[id]; !ok && in.NodeID == n {
			s = Apply(s, InstanceDeleted{NodeID: n, InstanceID: id})
		}
	}
	for id, in := range asserted {
		if cur, ok := s.Instances[id]; ok {
			in.Active, in.ExpiresAt, in.Pinned, in.KeepAliveMs = cur.Active, cur.ExpiresAt, cur.Pinned, cur.KeepAliveMs
			if cur.Status == InstanceStatusFailed {
				in.Status, in.Error = cur.Status, cur.Error
			}
		}
		s = Apply(s, InstanceCreated{NodeID: n, Instance: in})
	}
	runs := map[string]bool{}
	for _, r := range e.Runners {
		if r.NodeID == n {
			runs[r.RunnerID] = true
			s = Apply(s, RunnerStatusChanged{NodeID: n, Runner: r})
		}
	}
	s.Runners = withoutWhere(s.Runners, func(r Runner) bool { return r.NodeID == n && !runs[r.RunnerID] })
	s.Downloads = withoutWhere(s.Downloads, func(d Download) bool { return d.NodeID == n })
	for _, d := range e.Downloads {
		s.Downloads = withDownload(s.Downloads, n, d)
	}
	return s
}

// Owned is one node's record of what it owns, folded from the events it
// publishes (Record). Not safe for concurrent use.
type Owned struct {
	node      string
	a         NodeStateAsserted // measurements; Instances and Runners unused
	instances map[string]Instance
	runners   map[string]Runner
	downloads map[string]Download
}

// NewOwned returns node's empty record.
func NewOwned(node string) *Owned {
	return &Owned{node: node, a: NodeStateAsserted{NodeID: node}, instances: map[string]Instance{}, runners: map[string]Runner{},
		downloads: map[string]Download{}}
}

// Record folds an event this node publishes into the record. It reports
// whether the node's instances changed (for the caller to save them).
func (o *Owned) Record(ev Event) (instancesChanged bool) {
	if ev.Node() != o.node {
		return false
	}
	switch e := ev.(type) {
	case NodeIdentityMeasured:
		o.a.Identity = &e.Identity
	case NodeMemoryMeasured:
		o.a.Memory = &e.Memory
	case NodeSystemMeasured:
		o.a.System = &e.System
	case NodeDiskMeasured:
		o.a.Disk = &e.Disk
	case NodeNetworkMeasured:
		o.a.Network = &e.Network
	case NodeLinksMeasured:
		o.a.Links = &e.Links
	case NodeModelsMeasured:
		o.a.Models = &e.Models
	case InstanceCreated:
		if e.Instance.NodeID == o.node {
			o.instances[e.Instance.InstanceID] = e.Instance
			return true
		}
	case InstanceDeleted:
		if _, ok := o.instances[e.InstanceID]; ok {
			delete(o.instances, e.InstanceID)
			maps.DeleteFunc(o.runners, func(_ string, r Runner) bool { return r.InstanceID == e.InstanceID })
			return true
		}
	case InstanceFailed:
		if in, ok := o.instances[e.InstanceID]; ok {
			in.Status, in.Error = InstanceStatusFailed, e.Error
			o.instances[e.InstanceID] = in
			return true
		}
	case InstanceUsed:
		// As Apply does; only for instances this node owns (the usage of
		// another owner's instance is that owner's to restore).
		if in, ok := o.instances[e.InstanceID]; ok {
			o.instances[e.InstanceID] = Apply(State{Instances: map[string]Instance{in.InstanceID: in}}, e).Instances[in.InstanceID]
		}
	case DownloadProgress:
		o.downloads = withDownload(o.downloads, o.node, e.Download)
	case RunnerStatusChanged:
		if e.Runner.Status == RunnerShutdown {
			delete(o.runners, e.Runner.RunnerID) // stopped: nothing left to assert
		} else {
			o.runners[e.Runner.RunnerID] = e.Runner
		}
	}
	return false
}

// Has reports whether the node owns the instance.
func (o *Owned) Has(instanceID string) bool {
	_, ok := o.instances[instanceID]
	return ok
}

// Instances returns the instances the node owns, sorted by id.
func (o *Owned) Instances() []Instance {
	return sortedValues(o.instances, func(in Instance) string { return in.InstanceID })
}

// Assertion is the event that restores the node's part of a state.
func (o *Owned) Assertion() NodeStateAsserted {
	a := o.a
	a.Instances = o.Instances()
	a.Runners = sortedValues(o.runners, func(r Runner) string { return r.RunnerID })
	if len(o.downloads) > 0 {
		a.Downloads = sortedValues(o.downloads, func(d Download) string { return d.ID })
	}
	return a
}

// Prune forgets failed runners whose instance is gone from s, so that the
// record stays bounded by the live instances.
func (o *Owned) Prune(s State) {
	maps.DeleteFunc(o.runners, func(_ string, r Runner) bool {
		_, ok := s.Instances[r.InstanceID]
		return !ok && r.Status == RunnerFailed
	})
}

// Diff says how s disagrees with the record ("" when it does not): a
// measurement missing, another identity or model list, an instance too
// many, missing or not failed, a runner missing, in another status, or
// claimed while the node does not run it. Usage counts and newer samples
// are not differences.
func (o *Owned) Diff(s State) string {
	var d []string
	n := o.node
	present := func(name string, have bool, ok bool) {
		if have && !ok {
			d = append(d, name+" missing")
		}
	}
	id, ok := s.NodeIdentities[n]
	if o.a.Identity != nil && (!ok || !sameJSON(id, *o.a.Identity)) {
		d = append(d, "identity")
	}
	_, ok = s.NodeMemory[n]
	present("memory", o.a.Memory != nil, ok)
	_, ok = s.NodeSystem[n]
	present("system", o.a.System != nil, ok)
	_, ok = s.NodeDisk[n]
	present("disk", o.a.Disk != nil, ok)
	_, ok = s.NodeNetwork[n]
	present("network", o.a.Network != nil, ok)
	_, ok = s.NodeLinkTelemetry[n]
	present("links", o.a.Links != nil, ok)
	if m, ok := s.NodeModels[n]; o.a.Models != nil && (!ok || !sameJSON(m.Models, o.a.Models.Models)) {
		d = append(d, "models")
	}
	for id, in := range s.Instances {
		if _, ok := o.instances[id]; !ok && in.NodeID == n {
			d = append(d, "instance "+id+" deleted")
		}
	}
	for id, in := range o.instances {
		cur, ok := s.Instances[id]
		switch {
		case !ok:
			d = append(d, "instance "+id+" missing")
		case !sameJSON(cur.Ranks, in.Ranks) || cur.ModelID != in.ModelID:
			d = append(d, "instance "+id+" placement")
		case in.Status == InstanceStatusFailed && cur.Status != InstanceStatusFailed:
			d = append(d, "instance "+id+" failure")
		}
	}
	for id, r := range o.runners {
		if _, ok := s.Instances[r.InstanceID]; !ok {
			continue // the runner goes with its instance
		}
		if cur, ok := s.Runners[id]; !ok || cur.Status != r.Status {
			d = append(d, "runner "+id)
		}
	}
	for id, r := range s.Runners {
		if _, ok := o.runners[id]; !ok && r.NodeID == n && r.Status != RunnerShutdown {
			d = append(d, "runner "+id+" not running")
		}
	}
	for id, dl := range o.downloads {
		if cur, ok := s.Downloads[id]; !ok || cur.Status != dl.Status {
			d = append(d, "download "+id)
		}
	}
	slices.Sort(d)
	return strings.Join(d, ", ")
}

func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func sortedValues[V any](m map[string]V, key func(V) string) []V {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b V) int { return strings.Compare(key(a), key(b)) })
	if out == nil {
		out = []V{}
	}
	return out
}

// OwnedInstancesFile is what a node keeps on disk of its instances, so
// that a restart can restore them.
type OwnedInstancesFile struct {
	NodeID    string     `json:"nodeId"`
	Instances []Instance `json:"instances"`
}

// Restore puts instances read back from disk into the record, as if the
// node had just published them.
func (o *Owned) Restore(ins []Instance) error {
	for _, in := range ins {
		if in.NodeID != o.node {
			return fmt.Errorf("instance %s is owned by %s, not %s", in.InstanceID, in.NodeID, o.node)
		}
		o.instances[in.InstanceID] = in
	}
	return nil
}
