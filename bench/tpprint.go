package bench

import (
	"fmt"
	"io"
)

// PrintTP prints a TP report as a table.
func PrintTP(w io.Writer, r *TPReport) {
	if r.Config != "" {
		printTPRunners(w, r)
	}
	if r.Choice != nil {
		if r.Config != "" {
			fmt.Fprintln(w)
		}
		pin := "agents unpinned"
		if r.Choice.Cores != nil {
			pin = fmt.Sprintf("each agent pinned to its own core (%v), runners on one thread: one machine standing in for 2", r.Choice.Cores)
		}
		fmt.Fprintf(w, "parallelism auto, two agents through delay proxies (%s):\n", pin)
		PrintChoice(w, r.Choice)
	}
}

// ratios are a[i] / b[i].
func ratios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

func printTPRunners(w io.Writer, r *TPReport) {
	pin := "unpinned"
	if r.Cores != nil {
		pin = fmt.Sprintf("each runner pinned to its own core (%v): one machine standing in for %d", r.Cores[:r.Ranks], r.Ranks)
	}
	fmt.Fprintf(w, "%s\n%s; %s; all-reduce values in %s\n\n", r.Model, r.Config, pin, r.Wire)
	fmt.Fprintf(w, "%-26s %12s %12s %9s\n", "", "1 runner", fmt.Sprintf("tp %d", r.Ranks), "speedup")
	fmt.Fprintf(w, "%-26s %12.1f %12.1f %8.2fx\n", "prefill tok/s", r.Single.Prefill, r.Tensor.Prefill, r.PrefillX)
	fmt.Fprintf(w, "%-26s %12.1f %12.1f %8.2fx\n", "decode tok/s", r.Single.Decode, r.Tensor.Decode, r.DecodeX)
	fmt.Fprintf(w, "%-26s %12.1f %12.1f\n", "decode tok/s, traced", r.Single.DecodeTraced, r.Tensor.DecodeTraced)
	if r.Tensor.DecodeComputeMs > 0 {
		fmt.Fprintf(w, "%-26s %9.1f ms %9.1f ms   (of which all-reduce %.1f ms, the wait for the slower rank included)\n", "rank 0's passes per token",
			r.Single.DecodeComputeMs, r.Tensor.DecodeComputeMs, r.Tensor.DecodeReduceMs)
	}
	if len(r.DecodeRounds) > 0 {
		fmt.Fprintf(w, "%-26s", "decode speedup by round")
		for _, x := range r.DecodeRounds {
			fmt.Fprintf(w, " %.2fx", x)
		}
		fmt.Fprintln(w)
	}
	if r.Concurrent > 1 {
		fmt.Fprintf(w, "%-26s %12.1f %12.1f %8.2fx\n", fmt.Sprintf("%d at once, tok/s in all", r.Concurrent), r.Single.Batched, r.Tensor.Batched, r.BatchedX)
	}
	if r.DecodeCeiling > 0 {
		printCeiling(w, r)
	}
	if r.CeilingSkipped != "" {
		fmt.Fprintf(w, "\nnot measured: %s\n", r.CeilingSkipped)
	}
	fmt.Fprintf(w, "\nall-reduce of %d f32 between %d runners' processes (loopback TCP): p50 %.1f µs, p99 %.1f µs over %d\n",
		r.AllReduce.Values, r.Ranks, r.AllReduce.P50Us, r.AllReduce.P99Us, r.AllReduce.Iters)
	fmt.Fprintf(w, "weights: model %s;", HumanBytes(r.ModelBytes))
	for i, b := range r.SliceBytes {
		s := r.Slices[i]
		switch {
		case s.ExpertColumns:
			fmt.Fprintf(w, " rank %d %s (%d/%d heads, every expert's columns %d/%d)", i, HumanBytes(b), s.Heads, s.FullHeads, s.FFDim, s.FullFF)
			continue
		case s.FullExperts > 0:
			fmt.Fprintf(w, " rank %d %s (%d/%d heads, experts %d/%d)", i, HumanBytes(b), s.Heads, s.FullHeads, s.Experts, s.FullExperts)
			continue
		}
		fmt.Fprintf(w, " rank %d %s (%d/%d heads, ff %d/%d)", i, HumanBytes(b), s.Heads, s.FullHeads, s.FFDim, s.FullFF)
	}
	fmt.Fprintln(w)
}

// printCeiling prints what the cores allow: one runner of the whole model
// on each core at once, against one alone.
func printCeiling(w io.Writer, r *TPReport) {
	fmt.Fprintf(w, "\n%d runners of the whole model at once, one a core (the slowest): prefill %.1f tok/s, decode %.1f tok/s\n",
		r.Ranks, r.Together.Prefill, r.Together.Decode)
	fmt.Fprintf(w, "%-26s", "the cores' ceiling")
	if r.PrefillCeiling > 0 {
		fmt.Fprintf(w, " prefill %.2fx,", r.PrefillCeiling)
	}
	fmt.Fprintf(w, " decode %.2fx (by round", r.DecodeCeiling)
	for _, x := range r.CeilingRounds {
		fmt.Fprintf(w, " %.2fx", x)
	}
	fmt.Fprintf(w, "): %d × that over one runner alone, the speed-up with free communication\n", r.Ranks)
	fmt.Fprintf(w, "%-26s", "the group reaches")
	if r.PrefillCeiling > 0 {
		fmt.Fprintf(w, " prefill %.0f %%,", 100*r.PrefillX/r.PrefillCeiling)
	}
	fmt.Fprintf(w, " decode %.0f %% of it\n", 100*r.DecodeX/r.DecodeCeiling)
}
