package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// A GPU speed child that dies of a signal is tried once more; one that
// exits with an error, or crashes twice, is not, and its error is kept.
// The children are shell scripts standing in for `orrery speed
// --gpu-device`: what is under test is the parent's handling of them.
func TestMeasureGPUChildRetriesACrash(t *testing.T) {
	d := runnerapi.Device{ID: "0", Library: "Vulkan", Name: "Vulkan0"}
	good := `{"device":{"id":"0","library":"Vulkan","name":"Vulkan0"},"crossMicros":42}`
	for _, c := range []struct {
		name, script string
		runs         int
		ok           bool
		errHas       string
	}{
		{"crashes once", `if [ ! -e "$D/ran" ]; then : > "$D/ran"; kill -ABRT $$; fi; echo '` + good + `'`, 2, true, ""},
		{"crashes twice", `kill -SEGV $$`, 2, false, "and before that"},
		{"fails", `echo no device >&2; exit 1`, 1, false, "exit status 1: no device"},
		{"succeeds", `echo '` + good + `'`, 1, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			exe := filepath.Join(dir, "child")
			// Each run appends a line to runs, so the test counts them.
			script := "#!/bin/sh\nD=" + dir + "\necho x >> \"$D/runs\"\n" + c.script + "\n"
			if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			g := measureGPUChild(context.Background(), exe, speedConfig{dir: dir, threads: 1}, d)
			b, _ := os.ReadFile(filepath.Join(dir, "runs"))
			if runs := strings.Count(string(b), "x"); runs != c.runs {
				t.Errorf("%d children, want %d", runs, c.runs)
			}
			if ok := g.Error == "" && g.CrossMicros == 42; ok != c.ok || !strings.Contains(g.Error, c.errHas) {
				t.Errorf("figures %+v, want ok %v, error containing %q", g, c.ok, c.errHas)
			}
		})
	}
}
