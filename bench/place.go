package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
)

// Polling periods of place.
const (
	goneEvery  = 100 * time.Millisecond
	readyEvery = 200 * time.Millisecond
	// goneTimeout bounds the wait for deleted instances to leave the state.
	goneTimeout = 30 * time.Second
)

// place deletes the model's instances, places it on nodes and waits until
// every runner is ready, showing load progress. It returns the instance.
func place(ctx context.Context, c *client.Client, o Options, nodes []string, par string, prog *progress) (string, error) {
	st, err := c.State(ctx)
	if err != nil {
		return "", err
	}
	var deleted []string
	for id, in := range st.Instances {
		if in.ModelID == o.Model {
			if err := c.DeleteInstance(ctx, id); err != nil {
				return "", fmt.Errorf("delete the earlier instance %s: %w", id, err)
			}
			deleted = append(deleted, id)
		}
	}
	// The state this node serves learns of changes a moment later; the
	// deleted instances' memory must be free before placing anew.
	if err := waitState(ctx, c, goneTimeout, goneEvery, func(st state.State) (bool, error) {
		for _, id := range deleted {
			if _, ok := st.Instances[id]; ok {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return "", fmt.Errorf("wait for the earlier instances to go: %w", err)
	}
	req := api.PlaceRequest{Model: o.Model, Nodes: nodes, GPULayers: o.GPULayers}
	switch par {
	case "tensor":
		req.Parallelism = &api.Parallelism{Pipeline: 1, Tensor: len(nodes)}
	case "auto":
		req.Parallelism = &api.Parallelism{Auto: true}
	}
	pr, err := c.Place(ctx, req)
	if err != nil {
		return "", err
	}
	id := pr.Instance.InstanceID
	r := &readiness{id: id, model: o.Model, nodes: len(pr.Instance.Ranks), prog: prog}
	if err := waitState(ctx, c, o.Timeout, readyEvery, r.check); err != nil {
		return id, fmt.Errorf("instance %s not ready: %w", id, err)
	}
	return id, nil
}

// readiness follows a placed instance until its runners are ready.
type readiness struct {
	id, model string
	nodes     int
	prog      *progress
	seen      bool // the instance has appeared in the state
}

func (r *readiness) check(st state.State) (bool, error) {
	in, ok := st.Instances[r.id]
	switch {
	case !ok && r.seen:
		return false, fmt.Errorf("instance %s is gone", r.id)
	case !ok:
		return false, nil // not yet replicated to the node bench asks
	case in.Status == "Failed":
		return false, fmt.Errorf("instance %s failed: %s", r.id, in.Error)
	}
	r.seen = true
	ready, loaded, layers := 0, 0, 0
	for _, run := range st.Runners {
		if run.InstanceID != r.id {
			continue
		}
		switch run.Status {
		case "Ready", "Running":
			ready++
		case "Failed":
			return false, fmt.Errorf("runner %s failed: %s", run.RunnerID, run.Error)
		}
		loaded += run.LayersLoaded
		layers += run.TotalLayers
	}
	if ready == len(in.Ranks) {
		return true, nil
	}
	r.prog.line(fmt.Sprintf("loading %s on %d node(s): %d/%d runners ready, %d/%d layers", r.model, r.nodes, ready, len(in.Ranks), loaded, layers))
	return false, nil
}

// waitState polls the state every period until cond holds or fails, for
// at most limit.
func waitState(ctx context.Context, c *client.Client, limit, every time.Duration, cond func(state.State) (bool, error)) error {
	return pollUntil(ctx, limit, every, func() (bool, error) {
		st, err := c.State(ctx)
		if err != nil {
			return false, err
		}
		return cond(st)
	})
}

// pollUntil calls cond every period until it holds or fails, for at most
// limit.
func pollUntil(ctx context.Context, limit, every time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		if ok, err := cond(); ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}
