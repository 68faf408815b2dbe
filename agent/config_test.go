package agent

import (
	"strings"
	"testing"
)

func TestParsePortRange(t *testing.T) {
	for _, c := range []struct {
		in   string
		want [2]int
		err  bool
	}{
		{"41000-41003", [2]int{41000, 41003}, false},
		{"41000", [2]int{41000, 41000}, false},
		{" 1 - 65535 ", [2]int{1, 65535}, false},
		{"41003-41000", [2]int{}, true},
		{"0-10", [2]int{}, true},
		{"1-65536", [2]int{}, true},
		{"a-b", [2]int{}, true},
		{"", [2]int{}, true},
		{"1-2-3", [2]int{}, true},
	} {
		got, err := ParsePortRange(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
		if err != nil && !strings.Contains(err.Error(), "FIRST-LAST") {
			t.Errorf("ParsePortRange(%q): %v does not say what it wants", c.in, err)
		}
	}
}

func TestValidateDirectPorts(t *testing.T) {
	c := DefaultConfig()
	c.DataDir = t.TempDir()
	for _, p := range [][2]int{{}, {41000, 41003}, {5, 5}} {
		c.DirectPorts = p
		if err := c.validate(); err != nil {
			t.Errorf("direct ports %v: %v", p, err)
		}
	}
	for _, p := range [][2]int{{0, 5}, {6, 5}, {1, 70000}} {
		c.DirectPorts = p
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), "direct ports") {
			t.Errorf("direct ports %v: %v, want a refusal naming them", p, err)
		}
	}
}
