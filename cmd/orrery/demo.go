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
places a model across the nodes from the last one and streams one chat
completion through node 0 (printing its tok/s and trace id). Run from the
repository, the model is the trained KJV target (models/kjv), drafted by its
trained draft model beside rank 0: a base model that continues the prompt
in the style of the King James Bible. Elsewhere, or with --model "", it is
a generated small random-weight model (gibberish). Ctrl-C stops them all.

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
	fs.StringVar(&opts.Model, "model", repoFile("models/kjv/kjv-target-f16.gguf"), `GGUF model to serve (default: models/kjv/kjv-target-f16.gguf when run from the repository; "": generate a random-weight one)`)
	fs.StringVar(&opts.Draft, "draft", repoFile("models/kjv/kjv-draft-f16.gguf"), `draft model for --model, to speculate with (default: models/kjv/kjv-draft-f16.gguf when run from the repository; "": none)`)
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

// repoFile is path when it exists (the demo runs from the repository, as
// make run starts it), else "".
func repoFile(path string) string {
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}
