package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/termchat"
	"golang.org/x/term"
)

const runUsage = `Usage: orrery run [flags] MODEL [PROMPT]

Chats with MODEL through this machine's agent, as "ollama run" does. The
model is loaded first if no node runs it (placed on demand, a spinner
meanwhile). With a PROMPT argument, or with a prompt piped on stdin, it
answers once and exits (a PROMPT and piped text are sent together);
otherwise it reads prompts at ">>> " until /bye or Ctrl-D:

  """ …  """                 a prompt of several lines
  /set parameter NAME VALUE  temperature, top_p, top_k, seed, num_predict
  /set system TEXT           a system message for what follows
  /show info                 the model's architecture, size and where it runs
  /clear                     forget the conversation so far
  /bye                       leave

Up and down recall earlier prompts. Ctrl-C stops an answer, not the
session. Reasoning, from models that think, is shown dimmed.

With --draft-model, MODEL is placed with that draft model beside its rank
0 (it must be on that node) and speculates with it by default, as
llama.cpp's --model-draft; with --gpu-layers, with that many blocks on the
GPUs. Where MODEL already runs otherwise, it says so and stops.

Flags:
`

func runRun(ctx context.Context, args []string, stdin *os.File, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runUsage)
		fs.PrintDefaults()
	}
	apiURL := fs.String("api", client.DefaultBaseURL, "base URL of the agent's API")
	draft := fs.String("draft-model", "", "a draft model (the same vocabulary) to speculate with: MODEL is placed with it")
	draftMax := fs.Int("draft-max", 0, fmt.Sprintf("with --draft-model, the most tokens drafted a step (0: %d)", runnerapi.DefaultDraft))
	draftMin := fs.Int("draft-min", 0, "with --draft-model, the fewest tokens drafted a step (0: as few as the measured costs call for)")
	gpu := optionalGPULayersFlag(fs, "MODEL is placed with this many blocks of each rank on its node's GPU: auto, 0 or a number (default: each node's own --gpu-layers)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(pos) == 0 {
		fmt.Fprintln(stderr, "orrery run: want a model, e.g. orrery run qwen3:8b (orrery models ls lists them)")
		return 2
	}
	base, err := client.ParseBaseURL(*apiURL)
	if err != nil {
		fmt.Fprintf(stderr, "orrery run: --api %q: %v\n", *apiURL, err)
		return 2
	}
	s := termchat.New(apiClient(base, 0), pos[0], stdout, stderr)
	if *draft != "" {
		s.Spec = &runnerapi.Speculation{Draft: *draft, Max: *draftMax, Min: *draftMin}
		if err := s.Spec.CheckDefault(*draft); err != nil {
			fmt.Fprintf(stderr, "orrery run: --draft-max, --draft-min: %v\n", err)
			return 2
		}
	}
	s.GPULayers = gpu.value()
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		s.Dim = true
	}
	if err := s.CheckModel(ctx); err != nil {
		fmt.Fprintf(stderr, "orrery run: %v\n", err)
		return 1
	}
	prompt := strings.Join(pos[1:], " ")
	interactive := term.IsTerminal(int(stdin.Fd()))
	if !interactive {
		piped, err := io.ReadAll(io.LimitReader(stdin, maxRunInput))
		if err != nil {
			fmt.Fprintf(stderr, "orrery run: read stdin: %v\n", err)
			return 1
		}
		prompt = strings.TrimSpace(strings.Join([]string{prompt, strings.TrimSpace(string(piped))}, "\n\n"))
	}
	if prompt == "" && !interactive {
		fmt.Fprintln(stderr, "orrery run: nothing to ask: stdin was empty and no PROMPT was given")
		return 2
	}
	if err := s.Load(ctx); err != nil {
		fmt.Fprintf(stderr, "orrery run: %v\n", err)
		return 1
	}
	if prompt != "" {
		if err := s.Ask(ctx, prompt); err != nil {
			fmt.Fprintf(stderr, "orrery run: %v\n", err)
			return 1
		}
		return 0
	}
	return s.REPL(ctx, stdin)
}

// maxRunInput bounds a prompt piped on stdin.
const maxRunInput = 16 << 20
