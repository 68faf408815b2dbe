package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Options configures Cluster.
type Options struct {
	// Model is the model id, as in GET /v1/models.
	Model string
	// PP and TG are the prompt and generation lengths in tokens; see
	// Shapes. Conc are the concurrent requests per run.
	PP, TG, Conc []int
	// Cartesian takes every PP × TG combination even when the lists are
	// as long.
	Cartesian bool
	// Warmup unmeasured and Repeat measured runs of each shape and
	// concurrency.
	Warmup, Repeat int
	// Placements to measure; none means every node count that fits.
	Placements []Placement
	// GPULayers is each placement's blocks on its nodes' GPUs (nil: each
	// node's default; POST /instance's "gpuLayers").
	GPULayers *runnerapi.GPULayers
	// NoSystemMetrics skips sampling GPU, temperature and power (energy is
	// then null).
	NoSystemMetrics bool
	// MetricsInterval is the sampling period of memory and system metrics.
	MetricsInterval time.Duration
	// Timeout bounds one request, and the load of one placement.
	Timeout time.Duration
	// Progress receives a progress bar (TTY) or a line per step; nil
	// discards it.
	Progress io.Writer
	TTY      bool
}

// Placement is a node count (taken from the placement previews) or an
// explicit node set (ids or unique id prefixes), split as Parallelism
// says: "" (a pipeline, the default), "tensor" or "auto".
type Placement struct {
	Count       int
	Nodes       []string
	Parallelism string
}

func (p Placement) String() string {
	s := strings.Join(shortAll(p.Nodes), "+")
	if p.Count > 0 {
		s = fmt.Sprintf("%d node(s)", p.Count)
	}
	if p.Parallelism != "" {
		s = p.Parallelism + ":" + s
	}
	return s
}

// ParseIntList reads "128,512" (each ≥ 1); name is the flag's, for the
// error.
func ParseIntList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--%s %q: want a comma-separated list of integers ≥ 1", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParsePlacements reads "1,2,3" (node counts) and "ID+ID,ID" (node sets,
// ids or unique id prefixes, resolved against the cluster later), each
// optionally prefixed "tensor:" (one tensor-parallel group over them) or
// "auto:" (the plan the cost model picks over them).
func ParsePlacements(s string) ([]Placement, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Placement
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		par := ""
		for _, p := range []string{"tensor", "auto", "pipeline"} {
			if rest, ok := strings.CutPrefix(f, p+":"); ok {
				par, f = p, rest
			}
		}
		if par == "pipeline" {
			par = ""
		}
		if n, err := strconv.Atoi(f); err == nil {
			if n < 1 {
				return nil, fmt.Errorf("--placements: node count %d: want ≥ 1", n)
			}
			if par == "tensor" && n < 2 {
				return nil, fmt.Errorf("--placements: tensor:%d: a tensor-parallel group needs 2 nodes or more", n)
			}
			out = append(out, Placement{Count: n, Parallelism: par})
			continue
		}
		var nodes []string
		for _, id := range strings.Split(f, "+") {
			if id = strings.TrimSpace(id); id == "" {
				return nil, fmt.Errorf("--placements %q: empty node id", s)
			}
			nodes = append(nodes, id)
		}
		out = append(out, Placement{Nodes: nodes, Parallelism: par})
	}
	return out, nil
}

// Shapes pairs pp and tg lists of equal length, else (or with cartesian)
// takes their product.
func Shapes(pp, tg []int, cartesian bool) [][2]int {
	var out [][2]int
	if len(pp) == len(tg) && !cartesian {
		for i := range pp {
			out = append(out, [2]int{pp[i], tg[i]})
		}
		return out
	}
	for _, p := range pp {
		for _, t := range tg {
			out = append(out, [2]int{p, t})
		}
	}
	return out
}

// Short is a node id's first 8 characters, as tables show it.
func Short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func shortAll(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = Short(id)
	}
	return out
}

// HumanBytes is n in B, KiB, MiB or GiB with one decimal.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
