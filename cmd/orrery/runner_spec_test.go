package main

import (
	"strings"
	"testing"
)

func TestParseSpeculation(t *testing.T) {
	if sp, err := parseSpeculation("", "d"); sp != nil || err != nil {
		t.Errorf(`"": %+v %v, want none`, sp, err)
	}
	sp, err := parseSpeculation(`{"draft":"d","max":4,"p_min":0.5}`, "d")
	if err != nil || sp.Draft != "d" || sp.Max != 4 || sp.PMin == nil || *sp.PMin != 0.5 {
		t.Errorf("a default by the draft model: %+v %v", sp, err)
	}
	for _, c := range []struct{ v, draft, want string }{
		{`{"draft":"d"}`, "", `"ngram" only (no draft model)`},
		{`{"draft":"ngram","maxx":4}`, "", `unknown field "maxx"`},
		{`{"draft":"ngram","max":40}`, "", "want 1..16"},
		{`not json`, "", "invalid character"},
	} {
		if _, err := parseSpeculation(c.v, c.draft); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseSpeculation(%s, %q) = %v, want an error saying %s", c.v, c.draft, err, c.want)
		}
	}
	if got := draftIDOf("", "/models/kjv-draft-f16.gguf"); got != "kjv-draft-f16" {
		t.Errorf("draftIDOf: %q", got)
	}
}
