package termchat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/term"
)

// REPL reads prompts and commands from the terminal until /bye or Ctrl-D.
// The terminal is raw only while a line is read (x/term's line editor,
// with history); an answer streams in cooked mode, where Ctrl-C is a
// SIGINT that interruptible turns into the answer's cancellation.
func (s *Session) REPL(ctx context.Context, tty *os.File) int {
	fd := int(tty.Fd())
	in := &ctrlCReader{r: tty}
	t := term.NewTerminal(struct {
		io.Reader
		io.Writer
	}{in, s.out}, ">>> ")
	fmt.Fprintf(s.out, "%s is ready. /? for help, /bye or Ctrl-D to leave.\n", s.model)
	for {
		line, err := readLineRaw(fd, t, in)
		if errors.Is(err, errCtrlC) {
			fmt.Fprintln(s.out, "\nUse Ctrl-D or /bye to exit.")
			continue
		}
		if err != nil { // Ctrl-D on an empty line, or the terminal is gone
			fmt.Fprintln(s.out)
			return 0
		}
		if strings.HasPrefix(strings.TrimSpace(line), `"""`) {
			if line, err = s.readMultiline(fd, t, in, line); err != nil {
				continue // Ctrl-C or Ctrl-D abandons the prompt
			}
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "/"):
			quit, msg := s.command(line)
			if msg != "" {
				fmt.Fprintln(s.out, msg)
			}
			if quit {
				return 0
			}
			continue
		}
		err = interruptible(ctx, func(ctx context.Context) error { return s.Ask(ctx, line) })
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled) && ctx.Err() == nil:
			fmt.Fprintln(s.out, "(stopped)")
		default:
			fmt.Fprintf(s.errOut, "error: %v\n", err)
		}
	}
}

// readMultiline completes a prompt that began with """ on first: lines
// until one that ends with """, the quotes dropped.
func (s *Session) readMultiline(fd int, t *term.Terminal, in *ctrlCReader, first string) (string, error) {
	body := strings.TrimPrefix(strings.TrimSpace(first), `"""`)
	if strings.HasSuffix(body, `"""`) {
		return strings.TrimSuffix(body, `"""`), nil
	}
	lines := []string{body}
	t.SetPrompt("... ")
	defer t.SetPrompt(">>> ")
	for {
		l, err := readLineRaw(fd, t, in)
		if err != nil {
			return "", err
		}
		if strings.HasSuffix(strings.TrimSpace(l), `"""`) {
			lines = append(lines, strings.TrimSuffix(strings.TrimSpace(l), `"""`))
			return strings.Join(lines, "\n"), nil
		}
		lines = append(lines, l)
	}
}

var errCtrlC = errors.New("interrupt")

// readLineRaw reads one line with the terminal raw; Ctrl-C is errCtrlC.
func readLineRaw(fd int, t *term.Terminal, in *ctrlCReader) (string, error) {
	old, err := term.MakeRaw(fd)
	if err != nil {
		return "", err
	}
	defer term.Restore(fd, old)
	in.sawCtrlC = false
	line, err := t.ReadLine()
	if err == io.EOF && in.sawCtrlC {
		return "", errCtrlC
	}
	return line, err
}

// ctrlCReader notes a Ctrl-C (byte 3) passing through, which x/term's
// ReadLine reports as io.EOF, the same as Ctrl-D.
type ctrlCReader struct {
	r        io.Reader
	sawCtrlC bool
}

func (c *ctrlCReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if bytes.IndexByte(p[:n], 3) >= 0 {
		c.sawCtrlC = true
	}
	return n, err
}

const replHelp = `Commands:
  /set parameter NAME VALUE  temperature, top_p, top_k, seed, num_predict
  /set system TEXT           a system message for what follows
  /show info                 the model's architecture, size and where it runs
  /clear                     forget the conversation so far
  /bye                       leave
  """                        begin and end a prompt of several lines`

// command runs a /command: whether to leave, and what to say.
func (s *Session) command(line string) (quit bool, msg string) {
	f := strings.Fields(line)
	switch f[0] {
	case "/bye", "/exit":
		return true, ""
	case "/?", "/help":
		return false, replHelp
	case "/clear":
		s.msgs = nil
		return false, "Cleared the conversation."
	case "/show":
		if len(f) == 2 && f[1] == "info" {
			return false, s.showInfo()
		}
		return false, "Usage: /show info"
	case "/set":
		if len(f) >= 3 && f[1] == "system" {
			s.system = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(line, "/set")), "system"))
			return false, "Set the system message."
		}
		if len(f) == 4 && f[1] == "parameter" {
			if err := s.setParameter(f[2], f[3]); err != nil {
				return false, err.Error()
			}
			return false, fmt.Sprintf("Set parameter '%s' to '%s'.", f[2], f[3])
		}
		return false, "Usage: /set parameter NAME VALUE, or /set system TEXT"
	}
	return false, fmt.Sprintf("Unknown command %q: /? lists them.", f[0])
}

// setParameter sets one request parameter, Ollama's names.
func (s *Session) setParameter(name, v string) error {
	bad := func(want string) error { return fmt.Errorf("%s wants %s, not %q", name, want, v) }
	switch name {
	case "temperature", "top_p":
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x < 0 || (name == "top_p" && x > 1) || x > 100 {
			return bad("a number (temperature ≥ 0; top_p 0..1)")
		}
		if name == "temperature" {
			s.opts.Temperature = &x
		} else {
			s.opts.TopP = &x
		}
	case "top_k":
		k, err := strconv.Atoi(v)
		if err != nil || k < 0 {
			return bad("a whole number ≥ 0")
		}
		s.opts.TopK = &k
	case "seed":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return bad("a whole number")
		}
		s.opts.Seed = &n
	case "num_predict":
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			return bad("a whole number (-1: the default)")
		}
		s.opts.MaxTokens = max(n, 0)
	default:
		return fmt.Errorf("unknown parameter %q: temperature, top_p, top_k, seed or num_predict", name)
	}
	return nil
}

// showInfo describes the model as the agent lists it.
func (s *Session) showInfo() string {
	m := s.info.Orrery
	var b strings.Builder
	fmt.Fprintf(&b, "  Model\n    %-16s %s\n", "name", s.model)
	if m.Arch != "" {
		fmt.Fprintf(&b, "    %-16s %s\n", "architecture", m.Arch)
	}
	if m.Layers > 0 {
		fmt.Fprintf(&b, "    %-16s %d\n", "layers", m.Layers)
	}
	if m.Quantization != "" {
		fmt.Fprintf(&b, "    %-16s %s\n", "quantization", m.Quantization)
	}
	if m.Size != nil {
		fmt.Fprintf(&b, "    %-16s %.2f GiB\n", "size", float64(m.Size.InBytes)/(1<<30))
	}
	fmt.Fprintf(&b, "    %-16s %d\n", "on nodes", len(m.Nodes))
	return strings.TrimRight(b.String(), "\n")
}
