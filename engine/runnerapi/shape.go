package runnerapi

import (
	"errors"
	"fmt"
	"strconv"
)

// Limits of a Shape.
const (
	// MaxTensor bounds a tensor-parallel group.
	MaxTensor = 16
	// MaxRanks bounds an instance's ranks (every stage's group).
	MaxRanks = 256
)

// Shape is how an instance's ranks split a model: Pipeline stages, each
// holding a range of the blocks, each stage a tensor-parallel group of
// Tensor ranks that hold a slice (heads, MLP columns, experts) of every
// block of the stage. Rank r is slice r % Tensor of stage r / Tensor;
// the first rank of a stage leads its group and holds the stage's rank
// links; rank 0 serves. Tensor 1 is a plain pipeline, Pipeline 1 one
// group, {1, 1} one node.
//
// What a rank puts on a GPU and what on the CPU is not part of the shape:
// each rank decides that for its own blocks (state.ShardRange).
type Shape struct {
	Pipeline int `json:"pipeline"`
	Tensor   int `json:"tensor"`
}

// ShapeOf is the shape of ranks ranks in groups of tensor (0 or 1: a
// pipeline), as an instance records it.
func ShapeOf(ranks, tensor int) Shape {
	t := max(tensor, 1)
	return Shape{Pipeline: ranks / t, Tensor: t}
}

// Group is the size of each stage's group: 1 for a pipeline.
func (s Shape) Group() int { return max(s.Tensor, 1) }

// Ranks is the number of ranks: every stage's group.
func (s Shape) Ranks() int { return s.Pipeline * s.Group() }

// TensorParallel reports whether the stages are groups of several ranks.
func (s Shape) TensorParallel() bool { return s.Tensor > 1 }

// Stage returns rank's pipeline stage and its slice of the stage's group.
func (s Shape) Stage(rank int) (stage, slice int) { return rank / s.Group(), rank % s.Group() }

// Rank is the rank of slice slice of stage stage.
func (s Shape) Rank(stage, slice int) int { return stage*s.Group() + slice }

// Leads reports whether rank leads its stage's group: the first rank of a
// stage, which holds the stage's rank links.
func (s Shape) Leads(rank int) bool { _, slice := s.Stage(rank); return slice == 0 }

// Next is the rank rank's pipeline link goes to: the next stage's leader
// (the last stage's goes back to rank 0, with the sampled tokens); false
// for a rank that leads no stage, or with one stage.
func (s Shape) Next(rank int) (int, bool) {
	stage, slice := s.Stage(rank)
	if slice != 0 || s.Pipeline < 2 {
		return 0, false
	}
	return s.Rank((stage+1)%s.Pipeline, 0), true
}

// Prev is the rank whose pipeline link comes in to rank: the previous
// stage's leader; false as Next.
func (s Shape) Prev(rank int) (int, bool) {
	stage, slice := s.Stage(rank)
	if slice != 0 || s.Pipeline < 2 {
		return 0, false
	}
	return s.Rank((stage+s.Pipeline-1)%s.Pipeline, 0), true
}

// Peers are the ranks of rank's group other than itself, lowest first.
// Within a group each rank dials the lower ones (MeshDials) and accepts
// the higher ones.
func (s Shape) Peers(rank int) []int {
	stage, _ := s.Stage(rank)
	var out []int
	for r := s.Rank(stage, 0); r < s.Rank(stage+1, 0); r++ {
		if r != rank {
			out = append(out, r)
		}
	}
	return out
}

// MeshDials reports whether rank from dials rank to's group link: both in
// one group, to below from.
func (s Shape) MeshDials(from, to int) bool {
	fs, fslice := s.Stage(from)
	ts, tslice := s.Stage(to)
	return s.TensorParallel() && fs == ts && tslice < fslice && to >= 0
}

// ErrShape is wrapped by Validate's errors.
var ErrShape = errors.New("shape")

// Validate checks the counts.
func (s Shape) Validate() error {
	switch {
	case s.Pipeline < 1:
		return fmt.Errorf("%w: %d pipeline stages, want 1 or more", ErrShape, s.Pipeline)
	case s.Tensor < 1 || s.Tensor > MaxTensor:
		return fmt.Errorf("%w: tensor-parallel groups of %d, want 1..%d", ErrShape, s.Tensor, MaxTensor)
	case s.Ranks() > MaxRanks:
		return fmt.Errorf("%w: %s is %d ranks, at most %d", ErrShape, s, s.Ranks(), MaxRanks)
	}
	return nil
}

// String is how a shape reads in previews, logs and errors: "one node",
// "pipeline 3", "tensor 2" or "pipeline 2 × tensor 2".
func (s Shape) String() string {
	switch {
	case s.TensorParallel() && s.Pipeline > 1:
		return fmt.Sprintf("pipeline %d × tensor %d", s.Pipeline, s.Tensor)
	case s.TensorParallel():
		return fmt.Sprintf("tensor %d", s.Tensor)
	case s.Pipeline == 1:
		return "one node"
	}
	return fmt.Sprintf("pipeline %d", s.Pipeline)
}

// RunnerArgs are the flags that give rank's runner its place in the
// shape: --rank and --ranks (its stage), and in a group --tp-rank and
// --tp-ranks (its slice). ParseRunnerArgs reads them back.
func (s Shape) RunnerArgs(rank int) []string {
	stage, slice := s.Stage(rank)
	args := []string{"--rank", strconv.Itoa(stage), "--ranks", strconv.Itoa(s.Pipeline)}
	if s.TensorParallel() {
		args = append(args, "--tp-rank", strconv.Itoa(slice), "--tp-ranks", strconv.Itoa(s.Tensor))
	}
	return args
}

// ParseRunnerArgs is the shape and rank of a runner's --rank, --ranks,
// --tp-rank and --tp-ranks (tpRanks 0 or 1: no group).
func ParseRunnerArgs(stage, stages, slice, tpRanks int) (Shape, int, error) {
	s := Shape{Pipeline: stages, Tensor: max(tpRanks, 1)}
	if err := s.Validate(); err != nil {
		return Shape{}, 0, err
	}
	if stage < 0 || stage >= stages {
		return Shape{}, 0, fmt.Errorf("%w: --rank %d of --ranks %d", ErrShape, stage, stages)
	}
	if slice < 0 || slice >= s.Group() {
		return Shape{}, 0, fmt.Errorf("%w: --tp-rank %d of --tp-ranks %d", ErrShape, slice, s.Group())
	}
	return s, s.Rank(stage, slice), nil
}
