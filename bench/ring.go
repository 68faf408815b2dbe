package bench

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/orrery-cluster/orrery/agent/api"
)

// PrintRing prints a ring benchmark's hops, its mean full round and where
// its trace is; apiURL is the coordinating agent's URL, for the hint.
func PrintRing(w io.Writer, res api.RingBenchResult, apiURL string) {
	fmt.Fprintf(w, "ring of %d nodes, %d bytes, %d rounds\n\n", len(res.Order), res.Size, res.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "from\tto\tlatency min ms\tavg ms\tmax ms\tMB/s\t")
	for _, h := range res.Hops {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.1f\t\n", Short(h.From), Short(h.To), h.LatencyMsMin, h.LatencyMsAvg, h.LatencyMsMax, h.ThroughputMBps)
	}
	tw.Flush()
	if len(res.RoundMs) > 0 {
		fmt.Fprintf(w, "\nfull round: %.2f ms on average\n", Mean(res.RoundMs))
	}
	switch {
	case res.TraceSaved:
		fmt.Fprintf(w, "trace: %s (orrery trace stats %s --api %s)\n", res.TraceID, res.TraceID, apiURL)
	case res.TraceID != "":
		fmt.Fprintf(w, "trace: %s, kept by the master %s (query that node's API)\n", res.TraceID, Short(res.TraceMaster))
	}
}
