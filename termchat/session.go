package termchat

import (
	"context"
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

// Session is one model's conversation through the agent: `orrery run`.
type Session struct {
	c           *client.Client
	model       string
	out, errOut io.Writer
	// Dim dims the reasoning of models that think (stdout is a terminal).
	Dim    bool
	msgs   []client.ChatMessage
	system string
	opts   client.ChatRequest // the parameters set by /set
	info   api.ModelEntry
	// Spec, with --draft-model, is the placement's default speculation
	// by that draft model.
	Spec *runnerapi.Speculation
	// GPULayers, with --gpu-layers, is how many blocks of each rank go on
	// its node's GPU (nil: each node's default).
	GPULayers *runnerapi.GPULayers
}

// New is a session with model through the agent c (its Timeout unset:
// answers take as long as they take), writing answers to out and
// messages to errOut.
func New(c *client.Client, model string, out, errOut io.Writer) *Session {
	return &Session{c: c, model: model, out: out, errOut: errOut}
}

// quickTimeout bounds the quick calls to the agent: its models, its state
// and a placement (which returns before the runners load).
const quickTimeout = 10 * time.Second

// quick is s's agent with the quick calls' bound.
func (s *Session) quick() *client.Client {
	q := *s.c
	q.Timeout = quickTimeout
	return &q
}

// CheckModel asks the agent for the model, so that a typo fails at once
// with what there is instead.
func (s *Session) CheckModel(ctx context.Context) error {
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
func (s *Session) Load(ctx context.Context) error {
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
	if s.Spec != nil || s.GPULayers != nil {
		if err := s.placeAsked(ctx); err != nil {
			return err
		}
	}
	if err := s.c.Load(ctx, s.model); err != nil {
		return fmt.Errorf("load %s: %w", s.model, err)
	}
	return nil
}

// placeAsked places the model with the draft model, default speculation
// and GPU layers asked for (or finds it so placed), so that the load that
// follows routes to it; an instance of the model placed otherwise would
// take the chats instead, so it stops there, naming it.
func (s *Session) placeAsked(ctx context.Context) error {
	// A silent agent must not hang the start here either.
	c := s.quick()
	st, err := c.State(ctx)
	if err != nil {
		return err
	}
	req := api.PlaceRequest{Model: s.model, Speculative: s.Spec, GPULayers: s.GPULayers}
	if s.Spec != nil {
		req.DraftModel = s.Spec.Draft
	}
	for _, in := range st.Instances {
		if in.ModelID != s.model || in.Status == state.InstanceStatusFailed {
			continue
		}
		if in.DraftModel != req.DraftModel || !runnerapi.SameSpeculation(in.Speculative, s.Spec) || !sameGPU(in.GPULayers, s.GPULayers) {
			return fmt.Errorf("%s already runs as instance %s, not placed as asked (%s): delete it (DELETE /instance/%s) or run without those flags",
				s.model, in.InstanceID, s.asked(), in.InstanceID)
		}
	}
	// Any instance of it left is placed so: Place answers with it.
	if _, err := c.Place(ctx, req); err != nil {
		return fmt.Errorf("place %s (%s): %w", s.model, s.asked(), err)
	}
	return nil
}

// asked says how the model is to be placed: "draft model D at max K,
// --gpu-layers N".
func (s *Session) asked() string {
	var parts []string
	if s.Spec != nil {
		parts = append(parts, fmt.Sprintf("speculating with draft model %s at max %d", s.Spec.Draft, s.Spec.Max))
	}
	if s.GPULayers != nil {
		parts = append(parts, "--gpu-layers "+s.GPULayers.String())
	}
	return strings.Join(parts, ", ")
}

// sameGPU reports whether an instance's GPU layers are those asked for
// (nil: each node's default).
func sameGPU(a, b *runnerapi.GPULayers) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// Ask sends prompt with the conversation so far and streams the answer:
// reasoning dimmed on a terminal, then the content. The exchange joins the
// conversation only when the answer completed.
func (s *Session) Ask(ctx context.Context, prompt string) error {
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
			if !thinking && s.Dim {
				fmt.Fprint(s.out, "\x1b[2m")
			}
			thinking = true
			fmt.Fprint(s.out, s.printable(r))
		}
		if t := c.Content(); t != "" {
			if thinking {
				if s.Dim {
					fmt.Fprint(s.out, "\x1b[0m")
				}
				fmt.Fprint(s.out, "\n\n")
				thinking = false
			}
			answer.WriteString(t)
			fmt.Fprint(s.out, s.printable(t))
		}
	})
	if thinking && s.Dim {
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
func (s *Session) printable(text string) string {
	if !s.Dim {
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
