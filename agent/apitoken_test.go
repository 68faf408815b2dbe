package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAPIToken(t *testing.T) {
	dir := t.TempDir()
	noEnv := func(string) string { return "" }
	cfg := Config{DataDir: dir, APIAddr: "127.0.0.1:52416", Getenv: noEnv}
	// On loopback: none, and no file.
	if tok, made, err := apiToken(cfg); tok != "" || made || err != nil {
		t.Fatalf("loopback: %q %v %v", tok, made, err)
	}
	if _, err := os.Stat(filepath.Join(dir, APITokenFile)); !os.IsNotExist(err) {
		t.Fatalf("a token file for a loopback API: %v", err)
	}
	// Beyond loopback: made once, kept 0600, the same at the next start.
	cfg.APIAddr = "0.0.0.0:52416"
	tok, made, err := apiToken(cfg)
	if err != nil || !made || len(tok) < 40 {
		t.Fatalf("first start on 0.0.0.0: %q %v %v", tok, made, err)
	}
	st, err := os.Stat(filepath.Join(dir, APITokenFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	again, made, err := apiToken(cfg)
	if err != nil || made || again != tok {
		t.Fatalf("second start: %q %v %v, want %q not made", again, made, err, tok)
	}
	// A file others can read is refused, naming the fix.
	os.Chmod(filepath.Join(dir, APITokenFile), 0o644)
	if _, _, err := apiToken(cfg); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable token file: %v", err)
	}
	// Given by flag or environment: used as it is, when long enough.
	cfg.APIToken = "my-own-token-of-20ch"
	if got, made, err := apiToken(cfg); got != cfg.APIToken || made || err != nil {
		t.Errorf("--api-token: %q %v %v", got, made, err)
	}
	cfg.APIToken = ""
	cfg.Getenv = func(k string) string {
		if k == EnvAPIToken {
			return "short"
		}
		return ""
	}
	if _, _, err := apiToken(cfg); err == nil || !strings.Contains(err.Error(), "want 16") {
		t.Errorf("a 5-character token: %v", err)
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "0.0.0.0:1": false,
		"[::]:1": false, ":52416": false, "192.0.2.1:1": false, "myhost:1": false} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
