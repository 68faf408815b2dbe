package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/orrery-cluster/orrery/agent"
)

// Options is what the desktop app's flags say.
type Options struct {
	// Agent configures the in-process agent; unused with NoAgent.
	Agent agent.Config
	// NoAgent attaches to the already running agent at API instead of
	// starting one.
	NoAgent bool
	// API is the agent's local API URL (http://127.0.0.1:52416); with an
	// in-process agent it is set once the agent has bound its listener.
	API string
	// RunnerExe, when set, overrides the search for the orrery binary that
	// model runners are started with (see FindRunnerExe).
	RunnerExe string
	// LogLevel and LogFile ("" is stderr) set where logs go.
	LogLevel slog.Level
	LogFile  string
}

// ParseArgs parses the desktop app's flags. When ok is false the app must
// exit with code: 0 after -h, 2 on a usage error (already reported).
func ParseArgs(args []string, stderr io.Writer) (o Options, code int, ok bool) {
	o.Agent = agent.DefaultConfig()
	cfg := &o.Agent
	fs := flag.NewFlagSet("orrery-desktop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: orrery-desktop [flags]

Orrery's menu-bar item and window. It runs this node's agent in process
(flags as for "orrery agent"), or with --no-agent --api URL attaches to an
agent that is already running. Model runners are started with --runner-exe
when given, else the "orrery" binary beside this executable (in Orrery.app:
Contents/MacOS/orrery), else the one on PATH.

Flags:
`)
		fs.PrintDefaults()
	}
	finishAgentFlags := cfg.RegisterFlags(fs)
	fs.StringVar(&o.RunnerExe, "runner-exe", "", "the orrery binary model runners are started with (default: beside this executable, else on PATH)")
	fs.BoolVar(&o.NoAgent, "no-agent", false, "start no agent: attach to the one at --api")
	fs.StringVar(&o.API, "api", "", "with --no-agent: the running agent's API URL, e.g. http://127.0.0.1:52416")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.LogFile, "log-file", "", "append logs to this file instead of stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, 0, false
		}
		return o, 2, false
	}
	fail := func(format string, a ...any) (Options, int, bool) {
		fmt.Fprintf(stderr, "orrery-desktop: "+format+"\n", a...)
		return o, 2, false
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if err := o.LogLevel.UnmarshalText([]byte(strings.ToLower(*level))); err != nil {
		return fail("--log-level %q: want debug, info, warn or error", *level)
	}
	finishAgentFlags()
	switch {
	case o.NoAgent && o.API == "":
		return fail("--no-agent needs --api URL")
	case !o.NoAgent && o.API != "":
		return fail("--api attaches to a running agent: add --no-agent")
	case o.NoAgent:
		api, err := CheckAPIURL(o.API)
		if err != nil {
			return fail("--api: %v", err)
		}
		o.API = api
	}
	return o, 0, true
}

// CheckAPIURL checks that s is an agent's base URL (http://host:port) and
// returns it without a trailing slash.
func CheckAPIURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("%q: want http://host:port", s)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return "", fmt.Errorf("%q: want the API's base URL, without a path", s)
	}
	return u.Scheme + "://" + u.Host, nil
}

// ErrNoRunner means no orrery binary was found for model runners.
var ErrNoRunner = errors.New("no orrery binary for model runners")

// FindRunnerExe returns the orrery CLI that model runners are started with:
// "orrery" beside exe (in a .app both sit in Contents/MacOS), else the one
// lookPath finds. The desktop binary itself cannot be a runner: it carries
// no inference engine.
func FindRunnerExe(exe string, lookPath func(string) (string, error)) (string, error) {
	beside := filepath.Join(filepath.Dir(exe), "orrery")
	if st, err := os.Stat(beside); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return beside, nil
	}
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	if p, err := lookPath("orrery"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: none at %s nor on PATH", ErrNoRunner, beside)
}
