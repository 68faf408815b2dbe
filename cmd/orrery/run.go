package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
	"unicode"

	"github.com/orrery-cluster/orrery/agent/api"
	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
	"github.com/orrery-cluster/orrery/internal/chatstream"
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
llama.cpp's --model-draft; where MODEL already runs otherwise, it says so
and stops.

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
	s := &chatSession{c: apiClient(base, 0), model: pos[0], out: stdout, errOut: stderr}
	if *draft != "" {
		s.spec = &runnerapi.Speculation{Draft: *draft, Max: *draftMax, Min: *draftMin}
		if err := s.spec.CheckDefault(*draft); err != nil {
			fmt.Fprintf(stderr, "orrery run: --draft-max, --draft-min: %v\n", err)
			return 2
		}
	}
	if f, ok := stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		s.dim = true
	}
	if err := s.checkModel(ctx); err != nil {
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
	if err := s.load(ctx); err != nil {
		fmt.Fprintf(stderr, "orrery run: %v\n", err)
		return 1
	}
	if prompt != "" {
		if err := s.ask(ctx, prompt); err != nil {
			fmt.Fprintf(stderr, "orrery run: %v\n", err)
			return 1
		}
		return 0
	}
	return s.repl(ctx, stdin)
}

// runListTimeout bounds the quick calls to the agent: its models, its
// state and a placement (which returns before the runners load).
const runListTimeout = 10 * time.Second

// maxRunInput bounds a prompt piped on stdin.
const maxRunInput = 16 << 20

// chatSession is one model's conversation through the agent.
type chatSession struct {
	c           *client.Client
	model       string
	out, errOut io.Writer
	dim         bool // stdout is a terminal: reasoning dimmed
	msgs        []client.ChatMessage
	system      string
	opts        client.ChatRequest // the parameters set by /set
	info        api.ModelEntry
	// spec, with --draft-model, is the placement's default speculation
	// by that draft model.
	spec *runnerapi.Speculation
}

// quick is s's agent with the quick calls' bound (runListTimeout).
func (s *chatSession) quick() *client.Client { return apiClient(s.c.BaseURL, runListTimeout) }

// checkModel asks the agent for the model, so that a typo fails at once
// with what there is instead.
func (s *chatSession) checkModel(ctx context.Context) error {
	// The model list is small and quick: a silent agent must not hang the
	// start. (Loading and answering may rightly take long; Ctrl-C ends them.)
	ms, err := s.quick().Models(ctx)
	if err != nil {
		return fmt.Errorf("no agent answers (%v): start one with orrery agent", err)
	}
	var ids []string
	for _, m := range ms {
		if m.ID == s.model {
			s.info = m
			return nil
		}
		ids = append(ids, m.ID)
	}
	if len(ids) > 5 {
		ids = append(ids[:5], "…")
	}
	return fmt.Errorf("no node has model %q (there are: %s); orrery pull %s fetches it", s.model, strings.Join(ids, ", "), s.model)
}

// load loads the model, with a spinner on a terminal.
func (s *chatSession) load(ctx context.Context) error {
	if f, ok := s.errOut.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			frames := []rune("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for i := 0; ; i++ {
				fmt.Fprintf(s.errOut, "\r%c loading %s…", frames[i%len(frames)], s.model)
				select {
				case <-stop:
					fmt.Fprint(s.errOut, "\r\x1b[K")
					return
				case <-t.C:
				}
			}
		}()
		defer func() { close(stop); <-stopped }()
	}
	if s.spec != nil {
		if err := s.placeDrafted(ctx); err != nil {
			return err
		}
	}
	if err := s.c.Load(ctx, s.model); err != nil {
		return fmt.Errorf("load %s: %w", s.model, err)
	}
	return nil
}

// placeDrafted places the model with its draft model and default
// speculation (or finds it so placed), so that the load that follows
// routes to it; an instance of the model placed otherwise would take the
// chats instead, so it stops there, naming it.
func (s *chatSession) placeDrafted(ctx context.Context) error {
	// A silent agent must not hang the start here either.
	c := s.quick()
	st, err := c.State(ctx)
	if err != nil {
		return err
	}
	for _, in := range st.Instances {
		if in.ModelID != s.model || in.Status == state.InstanceStatusFailed {
			continue
		}
		if in.DraftModel != s.spec.Draft || !runnerapi.SameSpeculation(in.Speculative, s.spec) {
			return fmt.Errorf("%s already runs as instance %s, not speculating with draft model %s at max %d: delete it (DELETE /instance/%s) or run without --draft-model",
				s.model, in.InstanceID, s.spec.Draft, s.spec.Max, in.InstanceID)
		}
	}
	// Any instance of it left is placed so: Place answers with it.
	if _, err := c.Place(ctx, api.PlaceRequest{Model: s.model, DraftModel: s.spec.Draft, Speculative: s.spec}); err != nil {
		return fmt.Errorf("place %s with draft model %s: %w", s.model, s.spec.Draft, err)
	}
	return nil
}

// ask sends prompt with the conversation so far and streams the answer:
// reasoning dimmed on a terminal, then the content. The exchange joins the
// conversation only when the answer completed.
func (s *chatSession) ask(ctx context.Context, prompt string) error {
	req := s.opts
	req.Model = s.model
	if s.system != "" {
		req.Messages = append(req.Messages, client.ChatMessage{Role: "system", Content: s.system})
	}
	req.Messages = append(append(req.Messages, s.msgs...), client.ChatMessage{Role: "user", Content: prompt})
	var answer strings.Builder
	thinking := false
	_, err := s.c.ChatStream(ctx, req, func(c chatstream.Chunk) {
		if r := c.Reasoning(); r != "" {
			if !thinking && s.dim {
				fmt.Fprint(s.out, "\x1b[2m")
			}
			thinking = true
			fmt.Fprint(s.out, s.printable(r))
		}
		if t := c.Content(); t != "" {
			if thinking {
				if s.dim {
					fmt.Fprint(s.out, "\x1b[0m")
				}
				fmt.Fprint(s.out, "\n\n")
				thinking = false
			}
			answer.WriteString(t)
			fmt.Fprint(s.out, s.printable(t))
		}
	})
	if thinking && s.dim {
		fmt.Fprint(s.out, "\x1b[0m")
	}
	fmt.Fprintln(s.out)
	if err != nil {
		return err
	}
	s.msgs = append(s.msgs, client.ChatMessage{Role: "user", Content: prompt}, client.ChatMessage{Role: "assistant", Content: answer.String()})
	return nil
}

// printable is text as the terminal gets it: control characters other
// than newline and tab (an escape sequence from a model could move the
// cursor, clear the screen or retitle the window) become U+FFFD. Text to
// a pipe or a file is left as it is.
func (s *chatSession) printable(text string) string {
	if !s.dim {
		return text
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return unicode.ReplacementChar
	}, text)
}

// interruptible runs f with a context that SIGINT cancels: Ctrl-C stops
// an answer and the session goes on.
func interruptible(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	return f(ctx)
}
