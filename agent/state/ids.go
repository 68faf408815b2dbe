package state

import (
	"fmt"
	"iter"
	"maps"

	"github.com/orrery-cluster/orrery/internal/ident"
)

// checkIDs checks the ids an event carries besides its node's: instance
// ids, and the nodes of an instance's ranks and of a runner. Every node
// applies every event, and its supervisor names a rank's runner log after
// the instance id: one from the wire must never climb out of a directory.
func checkIDs(ev Event) error {
	switch e := ev.(type) {
	case InstanceCreated:
		return checkInstance(e.Instance)
	case InstanceDeleted:
		return ident.ValidInstanceID(e.InstanceID)
	case InstanceFailed:
		return ident.ValidInstanceID(e.InstanceID)
	case InstanceUsed:
		return ident.ValidInstanceID(e.InstanceID)
	case RunnerStatusChanged:
		return checkRunner(e.Runner)
	case NodeStateAsserted:
		for _, in := range e.Instances {
			if err := checkInstance(in); err != nil {
				return err
			}
		}
		for _, r := range e.Runners {
			if err := checkRunner(r); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkInstance(in Instance) error {
	if err := ident.ValidInstanceID(in.InstanceID); err != nil {
		return err
	}
	if err := ident.ValidNodeID(in.NodeID); err != nil {
		return fmt.Errorf("instance %s's owner: %w", in.InstanceID, err)
	}
	for i, rk := range in.Ranks {
		if err := ident.ValidNodeID(rk.NodeID); err != nil {
			return fmt.Errorf("instance %s, rank %d: %w", in.InstanceID, i, err)
		}
	}
	// Every node's supervisor indexes the ranks by the shape: its groups
	// must tile them.
	if sh := in.Shape(); len(in.Ranks) > 0 && (in.Tensor < 0 || sh.Ranks() != len(in.Ranks) || sh.Validate() != nil) {
		return fmt.Errorf("instance %s: %d ranks in tensor-parallel groups of %d", in.InstanceID, len(in.Ranks), in.Tensor)
	}
	return nil
}

func checkRunner(r Runner) error {
	if err := ident.ValidInstanceID(r.InstanceID); err != nil {
		return fmt.Errorf("runner %q: %w", r.RunnerID, err)
	}
	if err := ident.ValidNodeID(r.NodeID); err != nil {
		return fmt.Errorf("runner %q: %w", r.RunnerID, err)
	}
	return nil
}

// CheckIDs checks a state that came whole from the wire (a master's
// snapshot) as DecodeEvent checks an event: every node it keys by, every
// instance and every runner.
func (s State) CheckIDs() error {
	for _, keys := range []iter.Seq[string]{maps.Keys(s.NodeIdentities), maps.Keys(s.NodeMemory), maps.Keys(s.NodeSystem),
		maps.Keys(s.NodeDisk), maps.Keys(s.NodeNetwork), maps.Keys(s.NodeLinkTelemetry), maps.Keys(s.NodeModels)} {
		for id := range keys {
			if err := ident.ValidNodeID(id); err != nil {
				return err
			}
		}
	}
	for id, in := range s.Instances {
		if id != in.InstanceID {
			return fmt.Errorf("instance %q filed under %q", in.InstanceID, id)
		}
		if err := checkInstance(in); err != nil {
			return err
		}
	}
	for _, r := range s.Runners {
		if err := checkRunner(r); err != nil {
			return err
		}
	}
	return nil
}
