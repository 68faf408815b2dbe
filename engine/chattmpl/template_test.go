package chattmpl

import (
	"errors"
	"strings"
	"testing"
)

func TestCompileErrorsNameConstruct(t *testing.T) {
	for src, want := range map[string]string{
		"{% include 'x.jinja' %}":                  "{% include %}",
		"{% extends 'base' %}":                     "{% extends %}",
		"{% frobnicate %}":                         "{% frobnicate %}",
		"{{ x | from_json }}":                      "filter 'from_json'",
		"{{ x is frobbed }}":                       "test 'frobbed'",
		"{% for x in y recursive %}{% endfor %}":   "recursive for loop",
		"{{ f(*args) }}":                           "*args/**kwargs in a call",
		"{{ 123456789012345678901234567890 }}":     "integer literal",
		"{% macro m() %}{% break %}{% endmacro %}": "",
	} {
		_, err := Compile(src)
		if err == nil {
			t.Errorf("Compile(%q) succeeded, want an error", src)
			continue
		}
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Compile(%q) = %v, want a *SyntaxError", src, err)
			continue
		}
		if se.Construct != want || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%q) = %v (construct %q), want construct %q named", src, err, se.Construct, want)
		}
	}
}

func TestRenderLimits(t *testing.T) {
	for name, src := range map[string]string{
		"steps":     "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
		"output":    "{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}",
		"recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
		"range":     "{{ range(1000000) | length }}",
		"concat":    "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
		"copies":    "{% set s = 'x' * 4000000 %}{% for i in range(100000) %}{% set t = s ~ 'y' %}{% endfor %}",
		"captures":  "{% set s = 'x' * 4000000 %}{% for i in range(100000) %}{% set t %}{{ s }}{% endset %}{% endfor %}",
	} {
		tmpl, err := Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := tmpl.Render(nil); err == nil || strings.Contains(err.Error(), "internal error") {
			t.Errorf("%s: Render error = %v, want a limit error", name, err)
		}
	}
}

func TestRenderChatML(t *testing.T) {
	src := "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content | trim + '<|im_end|>\\n' }}{% endfor %}\n" +
		"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}\n"
	tmpl, err := Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	vars := Context([]Message{{"system", "Be brief."}, {"user", " Hi "}}, true, "<s>", "</s>")
	got, err := tmpl.Render(vars)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// raise_exception surfaces as a *TemplateError.
	tmpl, err = Compile("{{ raise_exception('System role not supported') }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(vars)
	var te *TemplateError
	if !errors.As(err, &te) || te.Msg != "System role not supported" {
		t.Errorf("Render = %v, want a TemplateError", err)
	}
}

func TestDecodeJSONKeepsOrder(t *testing.T) {
	v, err := DecodeJSON([]byte(`{"z": 1, "a": [2.5, null, true, "é"], "m": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Compile("{{ v | tojson }}|{{ v }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(map[string]any{"v": v})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"z": 1, "a": [2.5, null, true, "é"], "m": {}}|{'z': 1, 'a': [2.5, None, True, 'é'], 'm': {}}`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestNestingLimit(t *testing.T) {
	if _, err := Compile(strings.Repeat("{{ 1 - 1 }}{% if not x %}{% endif %}", 2000)); err != nil {
		t.Errorf("long flat template: %v", err)
	}
	if _, err := Compile("{{ " + strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000) + " }}"); err == nil {
		t.Errorf("1000 nested parentheses compiled")
	}
	if _, err := Compile(strings.Repeat("{% if x %}", 1000) + strings.Repeat("{% endif %}", 1000)); err == nil {
		t.Errorf("1000 nested ifs compiled")
	}
}
