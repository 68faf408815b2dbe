package placement

import (
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/engine/split"
)

// maxGroupings bounds how many ways of grouping the nodes a hybrid
// candidate tries (8 nodes in pairs: 105).
const maxGroupings = 128

// Candidates predicts every plan over nodes (best first): a pipeline over
// the first k of them for each k (split by memory, or by speed where that
// is predicted faster: Pipeline); a tensor-parallel group over the first
// T for each T ≥ 2 the model splits into; and pipeline P × tensor T over
// the first P·T, whose nodes it groups the way predicted fastest (the
// measured links decide which nodes share a group: a Thunderbolt pair,
// not two ends of Ethernet). With all, only the plans over every node
// (the nodes were named). A plan that does not fit, does not split or
// cannot be predicted is listed with its Error.
func Candidates(l Layout, c ModelCost, nodes []Node, all bool, in Inputs) []runnerapi.Prediction {
	var out []runnerapi.Prediction
	failed := func(p Plan, err error) runnerapi.Prediction {
		pr := runnerapi.Prediction{Plan: p.Shape.String(), Shape: p.Shape, Error: err.Error(), PrefillTokens: in.Prompt}
		for _, n := range nodes[:min(max(p.Shape.Ranks(), 0), len(nodes))] {
			pr.Nodes = append(pr.Nodes, n.ID)
		}
		return pr
	}
	predict := func(p Plan, err error) runnerapi.Prediction {
		if err != nil {
			return failed(p, err)
		}
		pr, err := c.Predict(p, in)
		if err != nil {
			pr.Error = err.Error()
		} else {
			pr.Fits = true
		}
		return pr
	}
	from := 1
	if all {
		from = len(nodes)
	}
	for k := from; k <= len(nodes) && k <= l.Layers; k++ {
		ranks, err := c.Pipeline(l, nodes[:k], in)
		out = append(out, predict(Plan{Shape: runnerapi.Shape{Pipeline: k, Tensor: 1}, Ranks: ranks}, err))
	}
	for t := max(2, from); t <= len(nodes); t++ {
		p := Plan{Shape: runnerapi.Shape{Pipeline: 1, Tensor: t}}
		sl, err := split.PlanTP(c.f, c.cfg, t)
		if err == nil {
			p.Ranks, err = Tensor(l, sl, nodes[:t])
		}
		out = append(out, predict(p, err))
	}
	for t := 2; 2*t <= len(nodes); t++ {
		sl, err := split.PlanTP(c.f, c.cfg, t)
		for p := 2; p*t <= len(nodes) && p <= l.Layers; p++ {
			if all && p*t != len(nodes) {
				continue
			}
			plan := Plan{Shape: runnerapi.Shape{Pipeline: p, Tensor: t}}
			if err != nil {
				out = append(out, failed(plan, err))
				continue
			}
			var best runnerapi.Prediction
			for i, order := range groupings(p*t, t, maxGroupings) {
				ns := make([]Node, len(order))
				for j, k := range order {
					ns[j] = nodes[k]
				}
				var herr error
				plan.Ranks, herr = Hybrid(l, sl, ns, p)
				pr := predict(plan, herr)
				if i == 0 || pr.Fits && (!best.Fits || pr.DecodeMs < best.DecodeMs) {
					best = pr
				}
			}
			out = append(out, best)
		}
	}
	return out
}

// groupings lists up to limit orders of nodes 0…n-1 that put them in
// different groups of t (consecutive in the order): every partition into
// groups of t, each group's nodes ascending, the groups by their first
// node. The first is the identity.
func groupings(n, t, limit int) [][]int {
	var out [][]int
	used := make([]bool, n)
	order := make([]int, 0, n)
	var walk func()
	walk = func() {
		if len(out) >= limit {
			return
		}
		if len(order) == n {
			out = append(out, append([]int(nil), order...))
			return
		}
		if len(order)%t == 0 { // a new group starts at the lowest node left
			for i := range used {
				if !used[i] {
					used[i] = true
					order = append(order, i)
					walk()
					order, used[i] = order[:len(order)-1], false
					return
				}
			}
		}
		for i := order[len(order)-1] + 1; i < n; i++ {
			if !used[i] {
				used[i] = true
				order = append(order, i)
				walk()
				order, used[i] = order[:len(order)-1], false
			}
		}
	}
	walk()
	return out
}
