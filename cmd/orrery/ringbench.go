package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

const ringBenchUsage = `Usage: orrery ring-bench [--api URL] [--size BYTES] [--rounds N] [--json]

Passes a payload around every node of the cluster over authenticated rank
links, N rounds, and prints each hop's latency (first byte sent until the
receiver's ack) and throughput. The agent at --api coordinates.
`

// ringBenchResult mirrors cluster.RingResult's JSON.
type ringBenchResult struct {
	Bench   string    `json:"bench"`
	Order   []string  `json:"order"`
	Size    int       `json:"sizeBytes"`
	Rounds  int       `json:"rounds"`
	RoundMs []float64 `json:"roundMs"`
	Hops    []struct {
		From           string  `json:"from"`
		To             string  `json:"to"`
		LatencyMsMin   float64 `json:"latencyMsMin"`
		LatencyMsAvg   float64 `json:"latencyMsAvg"`
		LatencyMsMax   float64 `json:"latencyMsMax"`
		ThroughputMBps float64 `json:"throughputMBps"`
	} `json:"hops"`
}

func runRingBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery ring-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ringBenchUsage); fs.PrintDefaults() }
	api := fs.String("api", "http://127.0.0.1:52416", "API URL of the coordinating agent")
	size := fs.Int("size", 16<<20, "payload size in bytes (at most 64 MiB)")
	rounds := fs.Int("rounds", 5, "rounds around the ring (at most 100)")
	asJSON := fs.Bool("json", false, "print the raw JSON result")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	body, _ := json.Marshal(map[string]int{"sizeBytes": *size, "rounds": *rounds})
	url := strings.TrimSuffix(*api, "/") + "/v1/cluster/ring-bench"
	fmt.Fprintf(stderr, "ring-bench: %d bytes × %d rounds, coordinated by %s …\n", *size, *rounds, *api)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintf(stderr, "orrery ring-bench: %v\n", err)
		return 2
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "orrery ring-bench: no agent answers at %s: %v — start one with `orrery agent`\n", *api, err)
		return 1
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintf(stderr, "orrery ring-bench: read response: %v\n", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(raw, &e)
		fmt.Fprintf(stderr, "orrery ring-bench: %s: %s\n", resp.Status, e.Error)
		return 1
	}
	if *asJSON {
		stdout.Write(raw)
		return 0
	}
	var res ringBenchResult
	if err := json.Unmarshal(raw, &res); err != nil {
		fmt.Fprintf(stderr, "orrery ring-bench: decode result: %v\n", err)
		return 1
	}
	printRingBench(stdout, res)
	return 0
}

func printRingBench(w io.Writer, res ringBenchResult) {
	fmt.Fprintf(w, "ring of %d nodes, %d bytes, %d rounds\n\n", len(res.Order), res.Size, res.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "from\tto\tlatency min ms\tavg ms\tmax ms\tMB/s\t")
	for _, h := range res.Hops {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.1f\t\n", short(h.From), short(h.To), h.LatencyMsMin, h.LatencyMsAvg, h.LatencyMsMax, h.ThroughputMBps)
	}
	tw.Flush()
	var sum float64
	for _, r := range res.RoundMs {
		sum += r
	}
	if len(res.RoundMs) > 0 {
		fmt.Fprintf(w, "\nfull round: %.2f ms on average\n", sum/float64(len(res.RoundMs)))
	}
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
