package termchat

import (
	"strings"
	"testing"
)

func TestReplCommands(t *testing.T) {
	s := &Session{model: "m"}
	for _, c := range []struct {
		line, want string
		quit       bool
	}{
		{"/set parameter temperature 0.5", "Set parameter 'temperature' to '0.5'.", false},
		{"/set parameter top_p 2", "top_p wants a number", false},
		{"/set parameter top_k 40", "Set parameter 'top_k'", false},
		{"/set parameter seed x", "seed wants a whole number", false},
		{"/set parameter num_predict -1", "Set parameter 'num_predict'", false},
		{"/set parameter mirostat 1", `unknown parameter "mirostat"`, false},
		{"/set system  be brief ", "Set the system message.", false},
		{"/set", "Usage: /set parameter", false},
		{"/show", "Usage: /show info", false},
		{"/clear", "Cleared the conversation.", false},
		{"/frobnicate", `Unknown command "/frobnicate"`, false},
		{"/?", "/set parameter NAME VALUE", false},
		{"/bye", "", true},
	} {
		quit, msg := s.command(c.line)
		if quit != c.quit || !strings.Contains(msg, c.want) {
			t.Errorf("%q: quit %v, %q; want %v and %q", c.line, quit, msg, c.quit, c.want)
		}
	}
	if s.opts.Temperature == nil || *s.opts.Temperature != 0.5 || s.opts.TopK == nil || *s.opts.TopK != 40 ||
		s.opts.TopP != nil || s.opts.Seed != nil || s.opts.MaxTokens != 0 || s.system != "be brief" {
		t.Errorf("options after the commands: %+v, system %q", s.opts, s.system)
	}
}
