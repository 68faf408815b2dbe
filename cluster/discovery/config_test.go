package discovery

import (
	"strings"
	"testing"
	"time"
)

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"bad node id", func(c *Config) { c.NodeID = "a/b" }, "node id"},
		{"empty node id", func(c *Config) { c.NodeID = "" }, "empty node id"},
		{"bad fingerprint", func(c *Config) { c.KeyFP = "abc" }, "16 hex"},
		{"bad version", func(c *Config) { c.Version = "1\x00" }, "printable"},
		{"no peer port", func(c *Config) { c.PeerPort = 0 }, "peer port 0"},
		{"peer port too big", func(c *Config) { c.PeerPort = 70000 }, "peer port 70000"},
		{"tiny interval", func(c *Config) { c.BrowseInterval = time.Nanosecond }, "browse interval"},
		{"static without port", func(c *Config) { c.Static = []string{"nonsense"} }, `static peer "nonsense": want host:port`},
		{"static port out of range", func(c *Config) { c.Static = []string{"host:99999"} }, `static peer "host:99999": port "99999": want 1..65535`},
		{"static port zero", func(c *Config) { c.Static = []string{"host:0"} }, `port "0"`},
		{"static port not a number", func(c *Config) { c.Static = []string{"host:http"} }, `port "http"`},
		{"static without host", func(c *Config) { c.Static = []string{":7000"} }, "empty host"},
		{"second static bad", func(c *Config) { c.Static = []string{"10.0.0.1:7000", "[::1]"} }, `static peer "[::1]"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "a")
			tc.edit(&cfg)
			d, err := New(cfg)
			if err == nil {
				t.Fatalf("New(%+v) succeeded, want an error", cfg)
			}
			if d != nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "discovery: ") {
				t.Fatalf("New error %q, want one starting with \"discovery: \" and mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	cfg := testConfig(t, "a")
	cfg.BrowseInterval = 0
	cfg.KeyFP = "0123456789ABCDEF"
	cfg.Static = []string{"10.0.0.1:7000", "10.0.0.1:7000", "[fd00::1]:7000", "peer.example:7000"}
	cfg.Logger = nil
	d := mustNew(t, cfg)
	if d.cfg.BrowseInterval != DefaultBrowseInterval || d.staleAfter != 3*DefaultBrowseInterval {
		t.Errorf("interval %v, stale after %v", d.cfg.BrowseInterval, d.staleAfter)
	}
	if d.cfg.KeyFP != "0123456789abcdef" {
		t.Errorf("fingerprint %q not lower-cased", d.cfg.KeyFP)
	}
	if len(d.static) != 3 {
		t.Errorf("static targets %+v: want the duplicate dropped", d.static)
	}
	if !d.static[0].ip.IsValid() || !d.static[1].ip.IsValid() || d.static[2].ip.IsValid() {
		t.Errorf("address literals not recognised: %+v", d.static)
	}
	if lan := DefaultLANConfig(); !lan.MDNS || lan.BrowseInterval != DefaultBrowseInterval {
		t.Errorf("DefaultLANConfig() = %+v", lan)
	}
	if loc := DefaultLocalConfig("/x"); loc.MDNS || loc.LoopbackDir != "/x" {
		t.Errorf("DefaultLocalConfig() = %+v", loc)
	}
}
