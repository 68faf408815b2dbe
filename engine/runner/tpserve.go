package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/collective"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// connectTP builds a tensor-parallel rank's mesh before its slice loads
// (the backend needs the group at load) and puts it in opts.
func (s *Server) connectTP(ctx context.Context, opts *backend.Options) error {
	if !s.cfg.Shape.TensorParallel() {
		return nil
	}
	if s.cfg.TPConnect == nil {
		return errors.New("a tensor-parallel rank needs TPConnect")
	}
	s.mu.Lock()
	s.health.Status = runnerapi.StatusConnecting
	s.mu.Unlock()
	mesh, err := s.cfg.TPConnect(ctx)
	if err != nil {
		return fmt.Errorf("rank %d of %s: %w", s.cfg.Rank, s.cfg.Shape, err)
	}
	s.mu.Lock()
	s.mesh = mesh
	s.health.Status = runnerapi.StatusLoading
	s.mu.Unlock()
	opts.Group = mesh
	return nil
}

// checkTiling checks, with one all-reduce, that the group's slices tile
// the model: every query head, every MLP column (of a mixture: every
// expert, and deepseek2's dense blocks' and shared experts' columns) held
// by exactly one rank, and every row of the output head (of vocab) by one
// rank, or none (the head whole on rank 0). Slices cut by different plans
// (a stale cache, two versions) would otherwise sum wrong partial outputs
// without a word.
func checkTiling(m *collective.Mesh, s *model.TPSlice, vocab int) error {
	if s == nil {
		return errors.New("the model file is not a tensor-parallel slice")
	}
	// A part's units are each held by one rank, or all by alt ranks (its
	// other arrangement); the lengths depend only on the model, so every
	// rank's vector has the same shape.
	type part struct {
		unit           string // a format naming unit i
		first, n, full int
		alt            float32
	}
	parts := []part{{"query head %d", s.Head, s.Heads, s.FullHeads, 1}}
	if s.FullExperts > 0 && !s.ExpertColumns {
		// A mixture's FF range is its dense blocks' columns (deepseek2),
		// or spans them all on every rank (no block is dense).
		parts = append(parts, part{"expert %d", s.Expert, s.Experts, s.FullExperts, 1},
			part{"dense MLP column %d", s.FF, s.FFDim, s.FullFF, float32(s.Ranks)})
	} else {
		parts = append(parts, part{"MLP column %d", s.FF, s.FFDim, s.FullFF, 1})
	}
	parts = append(parts, part{"shared experts' column %d", s.Shared, s.SharedFF, s.FullSharedFF, 1},
		part{"row %d of the output head", s.VocabFirst, s.VocabRows, vocab, 0})
	size := 0
	for _, p := range parts {
		size += p.full
	}
	v := make([]float32, size)
	at := 0
	for _, p := range parts {
		for i := p.first; i < p.first+p.n && i < p.full; i++ {
			v[at+i] = 1
		}
		at += p.full
	}
	if err := m.AllReduce(v); err != nil {
		return err
	}
	m.TakeTimings() // not a request's
	at = 0
	for _, p := range parts {
		held := v[at : at+p.full]
		at += p.full
		want := float32(1)
		if len(held) > 0 && held[0] == p.alt {
			want = p.alt
		}
		for i, x := range held {
			if x != want {
				return fmt.Errorf("the group's slices do not tile the model: %s is held by %v ranks (slices of different plans?)", fmt.Sprintf(p.unit, i), x)
			}
		}
	}
	return nil
}

// startTP starts a loaded tensor-parallel rank once the group's slices
// tile the model. Rank 0 returns its Forwarder, which replays every call
// on the others: the caller serves completions with it, or (a pipeline
// stage) the stage's frames. The others replay until the group breaks,
// which ends the runner (as a broken pipeline does), and return nil.
func (s *Server) startTP(ctx context.Context, rank backend.Rank) (Forwarder, error) {
	s.mu.Lock()
	mesh := s.mesh
	s.mu.Unlock()
	if err := checkTiling(mesh, rank.Config().TP, rank.Config().Vocab); err != nil {
		return nil, fmt.Errorf("rank %d of %s: %w", s.cfg.Rank, s.cfg.Shape, err)
	}
	if s.cfg.Shape.Leads(s.cfg.Rank) {
		return &TPLeader{F: rank, Mesh: mesh}, nil
	}
	first := s.cfg.Shape.Rank(s.stage(), 0)
	f := &TPFollower{F: rank, Mesh: mesh, Rank: s.cfg.Rank, First: first, Node: s.cfg.Node, NodeName: s.cfg.NodeName,
		OnTrace: s.cfg.OnStageTrace}
	s.loop(ctx, func(ctx context.Context) error {
		if err := f.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s broke at stage %d (rank %d): %w", s.cfg.Shape, s.stage(), s.cfg.Rank, err)
		}
		return nil
	})
	return nil, nil
}

// closeTPLocked closes the mesh: a rank blocked in an all-reduce returns.
func (s *Server) closeTPLocked() {
	if s.mesh != nil {
		s.mesh.Close()
	}
}

var _ backend.ExactCollective = (*collective.Mesh)(nil)
