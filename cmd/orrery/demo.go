package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/orrery-cluster/orrery/demo"
)

const demoUsage = `Usage: orrery demo [flags]

Starts a cluster of agents on this machine, one process each, that find each
other through a shared loopback dir and share a cluster key. It prints each
node's API URL once they agree on a master, runs a ring benchmark, then
generates a small random-weight model on the last node, places it there and
streams one chat completion through node 0 (printing its tok/s and trace id).
Ctrl-C stops them all.

Flags:
`

// runDemoCmd runs "orrery demo": 0 after a clean stop, 1 if the demo could
// not start or failed, 2 on usage errors.
func runDemoCmd(args []string, stdout, stderr io.Writer) int {
	var opts demo.Options
	fs := flag.NewFlagSet("orrery demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), demoUsage)
		fs.PrintDefaults()
	}
	fs.IntVar(&opts.Nodes, "nodes", demo.DefaultNodes, fmt.Sprintf("number of agents to start (1..%d)", demo.MaxNodes))
	fs.IntVar(&opts.BasePort, "base-port", demo.DefaultBasePort, "API port of node 0; node i gets base-port+i, on 127.0.0.1")
	fs.StringVar(&opts.Dir, "dir", demo.DefaultDir(), "directory for the cluster key, the loopback dir and each node's data (node-<i>/, kept across runs)")
	fs.BoolVar(&opts.NoChat, "no-chat", false, "skip generating, placing and chatting with the demo model")
	fs.StringVar(&opts.LogLevel, "log-level", "info", "the agents' log level: debug, info, warn or error (logs go to <dir>/node-<i>/agent.log)")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if opts.Dir == "" {
		opts.Dir = demo.DefaultDir()
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "orrery demo: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, opts, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "orrery demo: %v\n", err)
		return 1
	}
	return 0
}
