package chattmpl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// minAgree and minAgreeExtra are the numbers of template × conversation
// pairs (the conversations, and the extras) that must render like
// Python's jinja2 byte for byte, or fail where it fails with the same
// exception class. They are what this engine achieves today (all of
// llama.cpp's 70 templates): raise them as it improves, never lower them.
const (
	minAgree      = 350
	minAgreeExtra = 280
)

const python = "/usr/bin/python3" // Debian's, with python3-jinja2

// refTemplates returns llama.cpp's models/templates directory, or "" when
// the reference checkout is absent.
func refTemplates() string {
	root := os.Getenv("ORRERY_LLAMA_REF")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		root = filepath.Join(home, ".cache", "orrery", "llama-ref")
	}
	dir := filepath.Join(root, "llama.cpp", "models", "templates")
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	return dir
}

type refResult struct {
	Template     string  `json:"template"`
	Conversation string  `json:"conversation"`
	Output       *string `json:"output"`
	Error        *string `json:"error"`
}

// unavailable skips the test for want of a reference, or fails it under CI.
func unavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("jinja2 reference unavailable: %s", why)
	}
	t.Skipf("skipping jinja2 comparison: %s", why)
}

// pythonRender runs test/llamaref/render_templates.py with args and a
// file of convs.
func pythonRender(t *testing.T, convs []Conversation, args ...string) []refResult {
	t.Helper()
	if err := exec.Command(python, "-c", "import jinja2").Run(); err != nil {
		unavailable(t, python+" cannot import jinja2 (apt-get install python3-jinja2)")
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "test", "llamaref", "render_templates.py")
	convJSON, err := json.Marshal(convs)
	if err != nil {
		t.Fatal(err)
	}
	convFile := filepath.Join(t.TempDir(), "conversations.json")
	if err := os.WriteFile(convFile, convJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(python, append(append([]string{script}, args...), convFile)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	var res []refResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%s output: %v", script, err)
	}
	return res
}

// TestConformance renders every llama.cpp reference template with every
// conversation and compares with Python's jinja2 byte for byte.
func TestConformance(t *testing.T) {
	dir := refTemplates()
	if dir == "" {
		unavailable(t, "no llama.cpp reference checkout (make llama-ref, or set ORRERY_LLAMA_REF)")
	}
	ref := pythonRender(t, Conversations(), dir)
	if len(ref) == 0 {
		t.Fatal("the reference script rendered nothing")
	}
	convs := map[string]Conversation{}
	for _, c := range Conversations() {
		convs[c.Name] = c
	}
	type compiled struct {
		tmpl *Template
		err  error
	}
	cache := map[string]compiled{}
	var base, extra, bothErr tally
	perConv := map[string]*tally{}
	mismatches := map[string][]string{}
	raised := map[string][]string{} // template → conversations both engines refuse
	for _, r := range ref {
		c, ok := cache[r.Template]
		if !ok {
			src, err := os.ReadFile(filepath.Join(dir, r.Template+".jinja"))
			if err != nil {
				t.Fatal(err)
			}
			c.tmpl, c.err = Compile(string(src))
			cache[r.Template] = c
		}
		conv, ok := convs[r.Conversation]
		if !ok {
			t.Fatalf("unknown conversation %q in the reference output", r.Conversation)
		}
		var got string
		err := c.err
		if err == nil {
			vars, verr := conv.Vars()
			if verr != nil {
				t.Fatal(verr)
			}
			got, err = c.tmpl.Render(vars)
		}
		var why string
		switch {
		case r.Error != nil && err != nil && !sameFailure(*r.Error, err, c.err != nil):
			why = fmt.Sprintf("%s: jinja2 raised %q, Go failed otherwise: %v", r.Conversation, *r.Error, err)
		case r.Error != nil && err != nil:
			bothErr.pass++
			raised[r.Template] = append(raised[r.Template], r.Conversation)
		case r.Error != nil:
			why = fmt.Sprintf("%s: jinja2 raised %q, Go rendered %d bytes", r.Conversation, *r.Error, len(got))
		case err != nil:
			why = fmt.Sprintf("%s: Go error: %v", r.Conversation, err)
		case r.Output == nil:
			why = fmt.Sprintf("%s: reference has neither output nor error", r.Conversation)
		case got != *r.Output:
			why = fmt.Sprintf("%s: output differs %s", r.Conversation, firstDiff(*r.Output, got))
		}
		tl := &base
		if conv.Extra {
			tl = &extra
		}
		if perConv[r.Conversation] == nil {
			perConv[r.Conversation] = &tally{}
		}
		for _, x := range []*tally{tl, perConv[r.Conversation]} {
			x.total++
			if why == "" {
				x.pass++
			}
		}
		if why != "" {
			mismatches[r.Template] = append(mismatches[r.Template], why)
		}
	}
	names := make([]string, 0, len(mismatches))
	for n := range mismatches {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("MISMATCH %s:\n\t%s", n, strings.Join(mismatches[n], "\n\t"))
	}
	var refused []string
	for n, cs := range raised {
		refused = append(refused, fmt.Sprintf("%s (%s)", n, strings.Join(cs, ", ")))
	}
	sort.Strings(refused)
	t.Logf("both raise: %s", strings.Join(refused, "; "))
	for _, c := range Conversations() {
		pc := perConv[c.Name]
		t.Logf("conversation %-18s %d/%d", c.Name, pc.pass, pc.total)
	}
	t.Logf("jinja2 conformance: %d/%d pairs agree on the issue's conversations, %d/%d on the extras "+
		"(%d agree by both raising; %d templates, %d differ)",
		base.pass, base.total, extra.pass, extra.total, bothErr.pass, len(cache), len(names))
	if base.pass < minAgree || extra.pass < minAgreeExtra {
		t.Errorf("conformance regressed: %d/%d and %d/%d agree, want at least %d and %d",
			base.pass, base.total, extra.pass, extra.total, minAgree, minAgreeExtra)
	}
}

type tally struct{ pass, total int }

// sameFailure reports whether a Go error is the same kind of failure as
// the script's "Class: message": Go's render errors carry the same class
// names (TypeError, UndefinedError, TemplateError, ...); a template jinja2
// cannot compile must fail Compile.
func sameFailure(py string, err error, atCompile bool) bool {
	class, _, _ := strings.Cut(py, ":")
	if class == "TemplateSyntaxError" || class == "TemplateAssertionError" {
		return atCompile
	}
	return strings.Contains(err.Error(), class)
}

// firstDiff describes where want and got first differ.
func firstDiff(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	lo := max(0, i-30)
	clip := func(s string) string { return s[lo:min(len(s), i+40)] }
	return fmt.Sprintf("at byte %d (len want %d, got %d):\n\t\twant …%q\n\t\tgot  …%q", i, len(want), len(got), clip(want), clip(got))
}
