package archtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/orrery-cluster/orrery"

// pkg is one package of the module as `go list` sees it in the default
// build (no desktop tags).
type pkg struct {
	path    string   // import path, relative to the module ("agent/api")
	imports []string // direct imports, module-relative for our own
	deps    []string // every package it reaches, full paths
	cgo     bool     // it has cgo files itself
}

func listPackages(t *testing.T, extraArgs ...string) []pkg {
	t.Helper()
	// Stat every source file, so that `go test`'s cache knows this test's
	// result depends on them (go list reads them in another process).
	for _, f := range goFiles(t, repoRoot(t)) {
		os.Stat(f)
	}
	args := append([]string{"list"}, extraArgs...)
	args = append(args, "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}\t{{len .CgoFiles}}", module+"/...")
	cmd := exec.Command("go", args...)
	cmd.Dir = repoRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 4 {
			t.Fatalf("go list line %q", sc.Text())
		}
		p := pkg{path: rel(f[0]), deps: strings.Fields(f[2]), cgo: f[3] != "0"}
		for _, imp := range strings.Fields(f[1]) {
			p.imports = append(p.imports, rel(imp))
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// rel strips the module path from our own packages.
func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

func under(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }

// heavy are the dependencies that only the engine's compute backend and
// the desktop shell may pull in: cgo ggml, the Wails webview and the tray.
var heavy = []string{
	module + "/engine/backend/ggml",
	"github.com/ollama/ollama/ml/backend/ggml",
	"github.com/wailsapp/",
	"fyne.io/systray",
}

// TestNoHeavyDeps: agent, cluster, app (without the desktop tags) and the
// shared internal packages stay pure Go, without ggml, Wails or systray, so
// that the headless agent and every test of them build without cgo.
func TestNoHeavyDeps(t *testing.T) {
	for _, p := range listPackages(t) {
		if !under(p.path, "agent") && !under(p.path, "cluster") && !under(p.path, "app") && !under(p.path, "internal") {
			continue
		}
		for _, d := range p.deps {
			for _, h := range heavy {
				if strings.HasPrefix(d, h) {
					t.Errorf("%s reaches %s", p.path, d)
				}
			}
		}
	}
}

// TestImportDirection checks the one-way arrows of docs/architecture.md:
// app → agent → {cluster, engine} → engine/trace, with internal/ below all.
func TestImportDirection(t *testing.T) {
	// may lists, for each area, the areas of this module it may import.
	may := map[string][]string{
		"internal":     {"internal"},
		"engine/trace": {"engine/trace", "internal"},
		"engine":       {"engine", "internal"},
		"cluster":      {"cluster", "internal"},
		"frontend":     {},
		"agent":        {"agent", "cluster", "engine", "frontend", "internal"},
		"app":          {"app", "agent", "frontend", "internal"},
	}
	areaOf := func(path string) string {
		for _, a := range []string{"engine/trace", "internal", "engine", "cluster", "frontend", "agent", "app"} {
			if under(path, a) {
				return a
			}
		}
		return ""
	}
	for _, p := range listPackages(t) {
		area := areaOf(p.path)
		allowed, ok := may[area]
		if !ok {
			continue // cmd/, bench/, demo/, test/ and the root may import anything but app
		}
		for _, imp := range p.imports {
			if strings.Contains(imp, ".") && !strings.HasPrefix(imp, "internal") {
				continue // not ours (stdlib paths have no dot; module paths do)
			}
			to := areaOf(imp)
			if to == "" {
				if !isStd(imp) {
					t.Errorf("%s imports %s, which no rule covers", p.path, imp)
				}
				continue
			}
			okImp := false
			for _, a := range allowed {
				if to == a || a == "engine" && to == "engine/trace" {
					okImp = true
				}
			}
			if !okImp {
				t.Errorf("%s (%s) imports %s (%s): not allowed", p.path, area, imp, to)
			}
		}
	}
	// Nothing imports app but the desktop entry point.
	for _, p := range listPackages(t, "-tags", "desktop,production") {
		for _, imp := range p.imports {
			if under(imp, "app") && !under(p.path, "app") && p.path != "." {
				t.Errorf("%s imports %s", p.path, imp)
			}
		}
	}
}

// isStd reports whether path is a standard-library package: no dot in its
// first element.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// TestCgoOnlyInTheBackend: in the default build, only the ggml backend has
// cgo files of ours (the desktop files need the desktop tags).
func TestCgoOnlyInTheBackend(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.cgo && p.path != "engine/backend/ggml" {
			t.Errorf("%s has cgo files", p.path)
		}
	}
}

// TestRunnerContract: what crosses between agent and runner lives in
// engine/runnerapi, a leaf that imports at most sample, grammar and
// trace of ours; the agent reaches the runner only through it (it starts
// `orrery runner` as a process and never imports engine/runner), and the
// replicated state reaches no runner, chat template or compute backend,
// so that refactoring those cannot change the event log's JSON.
func TestRunnerContract(t *testing.T) {
	leaf := []string{"engine/runnerapi", "engine/sample", "engine/grammar", "engine/trace"}
	for _, p := range listPackages(t) {
		switch {
		case p.path == "engine/runnerapi":
			for _, imp := range p.imports {
				if !isStd(imp) && !slices.Contains(leaf, imp) {
					t.Errorf("engine/runnerapi imports %s: the contract may import only %v", imp, leaf[1:])
				}
			}
		case under(p.path, "agent"):
			for _, d := range p.deps {
				if under(rel(d), "engine/runner") {
					t.Errorf("%s reaches %s: the agent reaches runners through engine/runnerapi", p.path, rel(d))
				}
			}
		}
		if p.path == "agent/state" {
			for _, d := range p.deps {
				for _, no := range []string{"engine/runner", "engine/chattmpl", "engine/tokenizer", "engine/backend", "engine/model", "engine/modelstore", "engine/split", "engine/placement"} {
					if under(rel(d), no) {
						t.Errorf("agent/state reaches %s", rel(d))
					}
				}
			}
		}
	}
}
