package ggml

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/gpulib"
	"github.com/orrery-cluster/orrery/internal/testutil"
)

// TestSetup: Setup offers ollama's loader the backends gpulib finds, and
// nothing (an empty OLLAMA_LIBRARY_PATH, so that the loader does not fall
// back to the executable's ../lib/ollama) when they cannot load or there
// are none; a user's own OLLAMA_LIBRARY_PATH stays. Software makes
// lavapipe visible. (A test binary's build information names no module
// versions, so the check of the backends' ollama version against the
// binary's is gpulib's TestFindBesideExecutable.)
func TestSetup(t *testing.T) {
	root := testutil.WriteTree(t, map[string]string{
		"good/lib/ollama/libggml-vulkan.so":    "elf",
		"good/lib/ollama/libggml-base.so.0":    "elf",
		"good/lib/ollama/" + gpulib.MarkerFile: "ollama v0.17.4\n",
		"nobase/lib/ollama/libggml-vulkan.so":  "elf",
		"empty/lib/ollama/.keep":               "",
		"theirs/lib/ollama/libggml-vulkan.so":  "elf",
		"theirs/lib/ollama/libggml-base.so.0":  "elf",
		"nolibdir/libggml-vulkan.so":           "elf",
		"shader/.keep":                         "",
	})
	dir := func(d string) string { return filepath.Join(root, d, "lib/ollama") }
	tests := []struct {
		name    string
		cfg     SetupConfig
		env     map[string]string
		want    map[string]string // the environment after; "" set and empty
		problem string
		err     string
	}{
		{name: "usable", cfg: SetupConfig{LibDir: dir("good")}, want: map[string]string{ollamaLibEnv: dir("good")}},
		{name: "ORRERY_GPU_LIB", env: map[string]string{LibEnv: dir("good")}, want: map[string]string{ollamaLibEnv: dir("good")}},
		{name: "no libggml-base.so.0", cfg: SetupConfig{LibDir: dir("nobase")}, want: map[string]string{ollamaLibEnv: ""},
			problem: "libggml-base.so.0"},
		{name: "no backend", cfg: SetupConfig{LibDir: dir("empty")}, want: map[string]string{ollamaLibEnv: ""},
			problem: "no GPU backend"},
		{name: "the user's OLLAMA_LIBRARY_PATH", env: map[string]string{ollamaLibEnv: dir("theirs")},
			want: map[string]string{ollamaLibEnv: dir("theirs")}},
		{name: "no lib/ollama in the path", cfg: SetupConfig{LibDir: filepath.Join(root, "nolibdir")},
			want: map[string]string{}, err: "lib/ollama"},
		{name: "software", cfg: SetupConfig{LibDir: dir("good"), Software: true},
			want: map[string]string{ollamaLibEnv: dir("good"), vkVisibleEnv: "0", lpThreadsEnv: "1"}},
		{name: "software, devices named", cfg: SetupConfig{LibDir: dir("good"), Software: true},
			env:  map[string]string{vkVisibleEnv: "1", mesaCacheEnv: filepath.Join(root, "shader"), lpThreadsEnv: "4"},
			want: map[string]string{ollamaLibEnv: dir("good"), vkVisibleEnv: "1", mesaCacheEnv: filepath.Join(root, "shader"), lpThreadsEnv: "4"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range tc.env {
				env[k] = v
			}
			set := map[string]bool{}
			tc.cfg.Getenv = func(k string) string { return env[k] }
			tc.cfg.Setenv = func(k, v string) error { env[k], set[k] = v, true; return nil }
			info, err := Setup(tc.cfg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want one with %q", err, tc.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(info.Problem, tc.problem) || (tc.problem == "") != (info.Problem == "") {
				t.Errorf("problem %q, want one with %q", info.Problem, tc.problem)
			}
			for k, v := range tc.want {
				if got, ok := env[k]; !ok || got != v {
					t.Errorf("%s=%q (set %v), want %q", k, got, ok, v)
				}
			}
			if _, ok := tc.want[ollamaLibEnv]; !ok && set[ollamaLibEnv] {
				t.Errorf("%s set to %q, want it untouched", ollamaLibEnv, env[ollamaLibEnv])
			}
			if tc.cfg.Software && tc.env[mesaCacheEnv] == "" && !strings.HasSuffix(env[mesaCacheEnv], filepath.Join("orrery", "gpu", "mesa-shader-cache")) {
				t.Errorf("%s=%q, want the user cache's orrery/gpu/mesa-shader-cache", mesaCacheEnv, env[mesaCacheEnv])
			}
		})
	}
}
