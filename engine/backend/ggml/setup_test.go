package ggml

import (
	"path/filepath"
	"testing"
)

// Setup makes lavapipe visible, and runs it on one thread, only when a
// software device is allowed, and leaves what the environment already
// says; it points ollama's loader at a lib/ollama directory.
func TestSetupEnvironment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lib", "ollama")
	for _, c := range []struct {
		name     string
		software bool
		env      map[string]string
		want     map[string]string
	}{
		{"no software", false, nil, map[string]string{vkVisibleEnv: "", lpThreadsEnv: "", ollamaLibEnv: dir}},
		{"software", true, nil, map[string]string{vkVisibleEnv: "0", lpThreadsEnv: "1", ollamaLibEnv: dir}},
		{"software, set already", true, map[string]string{vkVisibleEnv: "1", lpThreadsEnv: "4"}, map[string]string{vkVisibleEnv: "1", lpThreadsEnv: "4"}},
	} {
		env := map[string]string{}
		for k, v := range c.env {
			env[k] = v
		}
		_, err := Setup(SetupConfig{LibDir: dir, Software: c.software,
			Getenv: func(k string) string { return env[k] },
			Setenv: func(k, v string) error { env[k] = v; return nil }})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for k, v := range c.want {
			if env[k] != v {
				t.Errorf("%s: $%s = %q, want %q", c.name, k, env[k], v)
			}
		}
	}
}
