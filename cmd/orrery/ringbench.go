package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/bench"
)

const ringBenchUsage = `Usage: orrery ring-bench [--api URL] [--size BYTES] [--rounds N] [--no-trace] [--repeat N] [--json]

Passes a payload around every node of the cluster over authenticated rank
links, N rounds, and prints each hop's latency (first byte sent until the
receiver's ack) and throughput. The agent at --api coordinates. Each run is
traced: every rank ships its spans to the master, which saves one trace
(see orrery trace). --repeat runs the benchmark several times and prints the
median full-round and end-to-end times, e.g. to compare with --no-trace.
`

// ringBenchTimeout bounds one benchmark run.
const ringBenchTimeout = 2 * time.Minute

func runRingBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery ring-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ringBenchUsage); fs.PrintDefaults() }
	apiURL := fs.String("api", client.DefaultBaseURL, "API URL of the coordinating agent")
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
	c := apiClient(strings.TrimRight(*apiURL, "/"), 0)
	c.Timeout = ringBenchTimeout
	req := api.RingBenchRequest{SizeBytes: *size, Rounds: *rounds, NoTrace: *noTrace}
	fmt.Fprintf(stderr, "ring-bench: %d bytes × %d rounds, coordinated by %s …\n", *size, *rounds, *apiURL)
	var walls, roundAvgs []float64
	for i := range *repeat {
		start := time.Now()
		raw, err := c.RingBenchJSON(ctx, req)
		if err != nil {
			return ringBenchFailed(stderr, *apiURL, err)
		}
		wall := float64(time.Since(start)) / 1e6
		if *asJSON && *repeat == 1 {
			stdout.Write(raw)
			return 0
		}
		var res api.RingBenchResult
		if err := json.Unmarshal(raw, &res); err != nil {
			fmt.Fprintf(stderr, "orrery ring-bench: decode result: %v\n", err)
			return 1
		}
		if *repeat == 1 {
			bench.PrintRing(stdout, res, *apiURL)
			return 0
		}
		walls, roundAvgs = append(walls, wall), append(roundAvgs, bench.Mean(res.RoundMs))
		fmt.Fprintf(stderr, "\rrun %d/%d", i+1, *repeat)
	}
	fmt.Fprintln(stderr)
	tracing := "traced"
	if *noTrace {
		tracing = "not traced"
	}
	fmt.Fprintf(stdout, "%d runs (%s): full round median %.3f ms, end to end (request until answer) median %.3f ms\n",
		*repeat, tracing, bench.Median(roundAvgs), bench.Median(walls))
	return 0
}

// ringBenchFailed reports a failed run and returns the exit code.
func ringBenchFailed(stderr io.Writer, apiURL string, err error) int {
	var ae *client.Error
	if errors.As(err, &ae) {
		fmt.Fprintf(stderr, "orrery ring-bench: %d %s: %s\n", ae.Status, http.StatusText(ae.Status), ae.Message)
		return 1
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) && ue.Op == "parse" {
		fmt.Fprintf(stderr, "orrery ring-bench: %v\n", err) // a bad --api
		return 2
	}
	fmt.Fprintf(stderr, "orrery ring-bench: no agent answers at %s: %v — start one with `orrery agent`\n", apiURL, err)
	return 1
}
