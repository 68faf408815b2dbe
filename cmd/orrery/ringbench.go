package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

const ringBenchUsage = `Usage: orrery ring-bench [--api URL] [--size BYTES] [--rounds N] [--no-trace] [--repeat N] [--json]

Passes a payload around every node of the cluster over authenticated rank
links, N rounds, and prints each hop's latency (first byte sent until the
receiver's ack) and throughput. The agent at --api coordinates. Each run is
traced: every rank ships its spans to the master, which saves one trace
(see orrery trace). --repeat runs the benchmark several times and prints the
median full-round and end-to-end times, e.g. to compare with --no-trace.
`

// ringBenchResult mirrors cluster.RingResult's JSON.
type ringBenchResult struct {
	Bench       string    `json:"bench"`
	Order       []string  `json:"order"`
	Size        int       `json:"sizeBytes"`
	Rounds      int       `json:"rounds"`
	RoundMs     []float64 `json:"roundMs"`
	TraceID     string    `json:"traceId"`
	TraceMaster string    `json:"traceMaster"`
	TraceSaved  bool      `json:"traceSaved"`
	Hops        []struct {
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
	noTrace := fs.Bool("no-trace", false, "do not trace the run")
	repeat := fs.Int("repeat", 1, "run this many times and print median times (1..1000)")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *repeat < 1 || *repeat > 1000 {
		fmt.Fprintf(stderr, "orrery ring-bench: --repeat %d: want 1..1000\n", *repeat)
		return 2
	}
	body, _ := json.Marshal(map[string]any{"sizeBytes": *size, "rounds": *rounds, "noTrace": *noTrace})
	url := strings.TrimSuffix(*api, "/") + "/v1/cluster/ring-bench"
	fmt.Fprintf(stderr, "ring-bench: %d bytes × %d rounds, coordinated by %s …\n", *size, *rounds, *api)
	var walls, roundAvgs []float64
	for i := range *repeat {
		start := time.Now()
		raw, code := ringBenchOnce(ctx, url, *api, body, stderr)
		if code != 0 {
			return code
		}
		wall := float64(time.Since(start)) / 1e6
		if *asJSON && *repeat == 1 {
			stdout.Write(raw)
			return 0
		}
		var res ringBenchResult
		if err := json.Unmarshal(raw, &res); err != nil {
			fmt.Fprintf(stderr, "orrery ring-bench: decode result: %v\n", err)
			return 1
		}
		if *repeat == 1 {
			printRingBench(stdout, res, *api)
			return 0
		}
		walls, roundAvgs = append(walls, wall), append(roundAvgs, mean(res.RoundMs))
		fmt.Fprintf(stderr, "\rrun %d/%d", i+1, *repeat)
	}
	fmt.Fprintln(stderr)
	tracing := "traced"
	if *noTrace {
		tracing = "not traced"
	}
	fmt.Fprintf(stdout, "%d runs (%s): full round median %.3f ms, end to end (request until answer) median %.3f ms\n",
		*repeat, tracing, median(roundAvgs), median(walls))
	return 0
}

// ringBenchOnce runs one benchmark; code is the exit code on failure.
func ringBenchOnce(ctx context.Context, url, api string, body []byte, stderr io.Writer) (raw []byte, code int) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		fmt.Fprintf(stderr, "orrery ring-bench: %v\n", err)
		return nil, 2
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "orrery ring-bench: no agent answers at %s: %v — start one with `orrery agent`\n", api, err)
		return nil, 1
	}
	defer resp.Body.Close()
	raw, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintf(stderr, "orrery ring-bench: read response: %v\n", err)
		return nil, 1
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(raw, &e)
		fmt.Fprintf(stderr, "orrery ring-bench: %s: %s\n", resp.Status, e.Error)
		return nil, 1
	}
	return raw, 0
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printRingBench(w io.Writer, res ringBenchResult, api string) {
	fmt.Fprintf(w, "ring of %d nodes, %d bytes, %d rounds\n\n", len(res.Order), res.Size, res.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "from\tto\tlatency min ms\tavg ms\tmax ms\tMB/s\t")
	for _, h := range res.Hops {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.1f\t\n", short(h.From), short(h.To), h.LatencyMsMin, h.LatencyMsAvg, h.LatencyMsMax, h.ThroughputMBps)
	}
	tw.Flush()
	if len(res.RoundMs) > 0 {
		fmt.Fprintf(w, "\nfull round: %.2f ms on average\n", mean(res.RoundMs))
	}
	switch {
	case res.TraceSaved:
		fmt.Fprintf(w, "trace: %s (orrery trace stats %s --api %s)\n", res.TraceID, res.TraceID, api)
	case res.TraceID != "":
		fmt.Fprintf(w, "trace: %s, kept by the master %s (query that node's API)\n", res.TraceID, short(res.TraceMaster))
	}
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
