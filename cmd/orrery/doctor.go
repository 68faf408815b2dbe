package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/engine/gpulib"
)

// doctorTimeout bounds each request to the agent.
const doctorTimeout = 3 * time.Second

const doctorUsage = `Usage: orrery doctor [--api URL] [--local]

Asks a running agent how it sees the cluster and why peers may be missing:
this node, the master, each member's round-trip time and clock offset, and
the discovery problems with what to do about them; then whether the node
computes on a GPU: where its GPU backends load from, the Vulkan drivers and
PCI GPUs, the devices ggml listed, and if it runs on the CPU, why. Exits 0
when discovery reports no problem, 1 when it reports one or the agent does
not answer (a node on the CPU is not a problem).

With --local it asks no agent: it shows the GPU part for this binary on
this machine (the devices only an agent's orrery speed lists), and exits 0.

Flags:
`

// runDoctor runs "orrery doctor": 0 when the agent reports no discovery
// problem, 1 when it does or does not answer, 2 on usage errors.
func runDoctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), doctorUsage)
		fs.PrintDefaults()
	}
	apiURL := fs.String("api", client.DefaultBaseURL, "base URL of the agent's local API")
	local := fs.Bool("local", false, "show only this binary's GPU backends, drivers and PCI GPUs, without an agent")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *local {
		if err := client.WriteGPUText(stdout, gpulib.Probe(gpulib.Config{}, "")); err != nil {
			fmt.Fprintf(stderr, "orrery doctor: %v\n", err)
			return 1
		}
		return 0
	}
	base, err := client.ParseBaseURL(*apiURL)
	if err != nil {
		fmt.Fprintf(stderr, "orrery doctor: --api %q: %v\n", *apiURL, err)
		return 2
	}

	ctx := context.Background()
	c := apiClient(base, doctorTimeout)
	r := client.DoctorReport{API: base}
	if r.Health, err = c.Health(ctx); err != nil {
		var ae *client.Error
		if errors.As(err, &ae) {
			fmt.Fprintf(stderr, "orrery doctor: %v\n", err)
		} else {
			fmt.Fprintf(stderr, "orrery doctor: no agent answers at %s: %v — start one with `orrery agent`\n", base, err)
		}
		return 1
	}
	if r.Cluster, err = c.Cluster(ctx); err == nil {
		r.Discovery, err = c.Discovery(ctx)
	}
	if err != nil {
		fmt.Fprintf(stderr, "orrery doctor: %v\n", err)
		return 1
	}
	// An agent from before /state/gpu answers 404: the rest still shows.
	if g, err := c.GPU(ctx); err == nil {
		r.GPU = &g
	} else {
		r.GPUError = err.Error()
	}
	if err := r.WriteText(stdout); err != nil {
		fmt.Fprintf(stderr, "orrery doctor: %v\n", err)
		return 1
	}
	if len(r.Discovery.Problems) > 0 {
		return 1
	}
	return 0
}
