package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

// orrery run against a real agent: one-shot with a PROMPT and with piped
// stdin, the refusals, then the chat in a real terminal under tmux
// (send-keys, capture-pane): an answer, /show info, /set parameter, a
// """ prompt of two lines, /clear, Ctrl-C stopping a long answer with the
// session going on, history by Up, Ctrl-C at the prompt, /bye.
func TestRunCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("slow end-to-end (orrery run in a terminal against a real agent, about 100 s): runs in make test")
	}
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Fatalf("tmux is needed for the terminal test (make deps installs it): %v", err)
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	model := genModel(t, bin, dir, "small-run", "--preset", "small")
	p := startAgentEnv(t, bin, testutil.FreeAddr(t), dir, []string{"HOME=" + dir}, "--loopback-dir", t.TempDir())
	waitHealthy(t, p)
	api := "http://" + p.addr

	run := func(stdin string, args ...string) (int, string, string) {
		c := exec.Command(bin, append([]string{"run", "--api", api}, args...)...)
		c.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	if code, out, e := run("", model, "hello", "there"); code != 0 || strings.TrimSpace(out) == "" {
		t.Errorf("one-shot with a PROMPT: %d %q %s", code, out, e)
	}
	if code, out, e := run("a prompt on stdin\n", model); code != 0 || strings.TrimSpace(out) == "" {
		t.Errorf("one-shot from stdin: %d %q %s", code, out, e)
	}
	if code, _, e := run("", "no-such-model", "hi"); code != 1 || !strings.Contains(e, `no node has model "no-such-model"`) || !strings.Contains(e, model) {
		t.Errorf("an unknown model: %d %q, want 1 naming it and what there is", code, e)
	}
	if code, _, e := run(""); code != 2 || !strings.Contains(e, "want a model") {
		t.Errorf("no model: %d %q", code, e)
	}
	if code, _, e := run("", model); code != 2 || !strings.Contains(e, "nothing to ask") {
		t.Errorf("empty stdin: %d %q", code, e)
	}
	runDrafted(t, p, model, run)
	runGPULayers(t, p, model, run)

	sock := fmt.Sprintf("orrery-run-%d", os.Getpid())
	tm := func(args ...string) string {
		out, err := exec.Command(tmux, append([]string{"-L", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	tm("new-session", "-d", "-x", "160", "-y", "50", fmt.Sprintf("%s run --api %s %s; echo EXIT=$?; sleep 120", bin, api, model))
	t.Cleanup(func() { exec.Command(tmux, "-L", sock, "kill-server").Run() })
	screen := func() string { return tm("capture-pane", "-p", "-S", "-500") }
	prompts := func() int { return len(regexp.MustCompile(`(?m)^>>>( |$)`).FindAllString(screen(), -1)) }
	wait := func(what string, cond func(string) bool) {
		t.Helper()
		var s string
		if !testutil.Eventually(60*time.Second, func() bool { s = screen(); return cond(s) }) {
			t.Fatalf("the terminal never showed %s:\n%s", what, s)
		}
	}
	has := func(sub string) func(string) bool { return func(s string) bool { return strings.Contains(s, sub) } }
	promptsAt := func(n int) func(string) bool { return func(string) bool { return prompts() >= n } }
	send := func(keys ...string) { tm(append([]string{"send-keys"}, keys...)...) }

	wait("the ready line", has(model+" is ready"))
	// Short answers, so that the steps do not wait on a loaded machine's
	// decode speed; the stop below needs a long one and sets it.
	send("/set parameter num_predict 24", "Enter")
	wait("num_predict set for short answers", has("Set parameter 'num_predict' to '24'."))
	send("hello", "Enter")
	wait("the prompt after an answer", promptsAt(3))
	send("/show info", "Enter")
	wait("the model's info", has("architecture     llama"))
	send("/set parameter temperature 0.2", "Enter")
	wait("the parameter set", has("Set parameter 'temperature' to '0.2'."))
	send("/set parameter temperature hot", "Enter")
	wait("a bad value refused", has(`temperature wants a number`))
	send(`"""first line`, "Enter")
	wait("the continuation prompt", func(s string) bool { return regexp.MustCompile(`(?m)^\.\.\.$`).MatchString(s) })
	send(`second line"""`, "Enter")
	wait("the prompt after the two-line prompt's answer", promptsAt(7))
	send("/set parameter num_predict 1200", "Enter")
	wait("num_predict set", promptsAt(8))
	send("/clear", "Enter") // room in the context for a long answer
	wait("the conversation cleared", has("Cleared the conversation."))
	send("tell me more", "Enter")
	before := len(screen())
	wait("the long answer streaming", func(s string) bool { return len(s) > before+200 })
	send("C-c")
	wait("the answer stopped", has("(stopped)"))
	wait("the prompt after the stop", promptsAt(10))
	send("Up")
	wait("history recalling the last prompt", func(s string) bool { return strings.Count(s, ">>> tell me more") >= 2 })
	send("C-c")
	wait("Ctrl-C's hint at the prompt", has("Use Ctrl-D or /bye to exit."))
	send("/bye", "Enter")
	wait("the session's end", has("EXIT=0"))
	t.Logf("the terminal:\n%s", screen())
}

// runDrafted: orrery run --draft-model places the model with its draft
// (here a copy of itself) and speculates by default; it refuses where the
// model already runs without it, naming the instance.
func runDrafted(t *testing.T, p *agentProc, model string, run func(string, ...string) (int, string, string)) {
	t.Helper()
	var st struct {
		Instances map[string]struct {
			ModelID, DraftModel string
			Speculative         *struct {
				Draft string
				Max   int
				Min   int
			}
		}
	}
	p.mustGet(t, "/state", &st)
	var plain string
	for id, in := range st.Instances {
		if in.ModelID == model {
			plain = id
		}
	}
	if code, _, e := run("", "--draft-model", model, model, "hi"); code != 1 || plain == "" || !strings.Contains(e, "already runs as instance "+plain) {
		t.Errorf("--draft-model beside a plain instance (%s): %d %q, want 1 naming it", plain, code, e)
	}
	if code, _, e := run("", "--draft-model", model, "--draft-max", "40", model, "hi"); code != 2 || !strings.Contains(e, "want 1..16") {
		t.Errorf("--draft-max 40: %d %q", code, e)
	}
	if code, _, e := run("", "--draft-model", model, "--draft-max", "3", "--draft-min", "5", model, "hi"); code != 2 || !strings.Contains(e, "min 5: want 0..3") {
		t.Errorf("--draft-min 5 above --draft-max 3: %d %q", code, e)
	}
	deleteInstance(t, p, plain)
	if code, out, e := run("", "--draft-model", model, "--draft-max", "3", "--draft-min", "1", model, "hello", "there"); code != 0 || strings.TrimSpace(out) == "" {
		t.Errorf("one-shot with --draft-model: %d %q %s", code, out, e)
	}
	st.Instances = nil // Unmarshal would keep the deleted one
	p.mustGet(t, "/state", &st)
	n := 0
	for _, in := range st.Instances {
		n++
		if in.ModelID != model || in.DraftModel != model || in.Speculative == nil || in.Speculative.Draft != model || in.Speculative.Max != 3 || in.Speculative.Min != 1 {
			t.Errorf("placed with --draft-model: %+v", in)
		}
	}
	if n != 1 {
		t.Errorf("%d instances after orrery run --draft-model, want 1", n)
	}
	// Again, with the same flags: the instance is reused.
	if code, _, e := run("", "--draft-model", model, "--draft-max", "3", "--draft-min", "1", model, "again"); code != 0 {
		t.Errorf("a second orrery run --draft-model: %d %s", code, e)
	}
	st.Instances = nil
	p.mustGet(t, "/state", &st)
	if len(st.Instances) != 1 {
		t.Errorf("%d instances after a second orrery run --draft-model, want 1", len(st.Instances))
	}
}

// runGPULayers: orrery run --gpu-layers places the model with that many
// blocks on the GPUs (the instance keeps it), refuses where the model runs
// placed otherwise (here with its draft, from runDrafted), naming the
// instance, and refuses a value other than auto, 0 or a number.
func runGPULayers(t *testing.T, p *agentProc, model string, run func(string, ...string) (int, string, string)) {
	t.Helper()
	type inst struct {
		ModelID   string
		GPULayers json.RawMessage
	}
	var st struct{ Instances map[string]inst }
	p.mustGet(t, "/state", &st)
	if len(st.Instances) != 1 {
		t.Fatalf("instances before: %+v, want runDrafted's one", st.Instances)
	}
	for id := range st.Instances {
		if code, _, e := run("", "--gpu-layers", "0", model, "hi"); code != 1 || !strings.Contains(e, "already runs as instance "+id) || !strings.Contains(e, "--gpu-layers 0") {
			t.Errorf("--gpu-layers 0 beside a drafted instance (%s): %d %q, want 1 naming it and the flag", id, code, e)
		}
		deleteInstance(t, p, id)
	}
	if code, _, e := run("", "--gpu-layers", "most", model, "hi"); code != 2 || !strings.Contains(e, `"most"`) {
		t.Errorf("--gpu-layers most: %d %q, want 2", code, e)
	}
	if code, out, e := run("", "--gpu-layers", "0", model, "hello"); code != 0 || strings.TrimSpace(out) == "" {
		t.Errorf("one-shot with --gpu-layers 0: %d %q %s", code, out, e)
	}
	st.Instances = nil
	p.mustGet(t, "/state", &st)
	if len(st.Instances) != 1 {
		t.Fatalf("instances after orrery run --gpu-layers 0: %+v, want 1", st.Instances)
	}
	for _, in := range st.Instances {
		if in.ModelID != model || string(in.GPULayers) != "0" {
			t.Errorf("placed with --gpu-layers 0: %+v (gpuLayers %s)", in, in.GPULayers)
		}
	}
}
