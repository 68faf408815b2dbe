package runner

import (
	"context"

	"github.com/orrery-cluster/orrery/engine/backend"
	"github.com/orrery-cluster/orrery/engine/model"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Forwarder is what generation runs on: tokens in at the first rank, the
// last position's logits out of the last. A backend.Rank holding every
// block is one; a pipeline of ranks across nodes is another.
type Forwarder interface {
	Config() model.Config
	Options() backend.Options
	Forward(ctx context.Context, b backend.Batch) (backend.Result, error)
	Remove(seq, from int) error
	Shift(seq, keep, discard int) error
}

// logprobsN is how many top logprobs the last rank computes for r (-1:
// none).
func logprobsN(r *runnerapi.Request) int {
	if !r.Logprobs {
		return -1
	}
	return r.TopLogprobs
}
