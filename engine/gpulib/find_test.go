package gpulib

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

// backends are the files of a make gpu build in dir, built from ollama
// version ver ("": no marker, as another ollama's).
func backends(dir, ver string) map[string]string {
	m := map[string]string{dir + "/libggml-vulkan.so": "elf", dir + "/libggml-base.so.0": "elf"}
	if ver != "" {
		m[dir+"/"+MarkerFile] = "ollama " + ver + "\nkey 0123\n"
	}
	return m
}

func tree(t *testing.T, parts ...map[string]string) string {
	t.Helper()
	all := map[string]string{}
	for _, p := range parts {
		for k, v := range p {
			all[k] = v
		}
	}
	return testutil.WriteTree(t, all)
}

func noEnv(string) string { return "" }

func env(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

func TestFindBesideExecutable(t *testing.T) {
	bin := map[string]string{"usr/bin/orrery": "exe", "bin/orrery": "exe"}
	tests := []struct {
		name    string
		files   []map[string]string
		exe     string
		wantDir string // relative to the tree; "" none
		problem string // a part of the problem; "" none
	}{
		{name: "package", files: []map[string]string{backends("usr/lib/orrery/lib/ollama", "v1")},
			exe: "usr/bin/orrery", wantDir: "usr/lib/orrery/lib/ollama"},
		{name: "checkout", files: []map[string]string{backends("lib/ollama", "v1")},
			exe: "bin/orrery", wantDir: "lib/ollama"},
		{name: "the package's before a system ollama's", files: []map[string]string{backends("usr/lib/orrery/lib/ollama", "v1"), backends("usr/lib/ollama", "")},
			exe: "usr/bin/orrery", wantDir: "usr/lib/orrery/lib/ollama"},
		{name: "only another ollama's", files: []map[string]string{backends("usr/lib/ollama", "")},
			exe: "usr/bin/orrery", wantDir: "usr/lib/ollama", problem: "no orrery-gpu.txt beside the GPU backends"},
		{name: "another version", files: []map[string]string{backends("lib/ollama", "v0")},
			exe: "bin/orrery", wantDir: "lib/ollama", problem: "built from ollama v0, this orrery from v1"},
		{name: "no libggml-base.so.0", files: []map[string]string{{"lib/ollama/libggml-vulkan.so": "elf", "lib/ollama/" + MarkerFile: "ollama v1\n"}},
			exe: "bin/orrery", wantDir: "lib/ollama", problem: "libggml-base.so.0, which the GPU backends link to, is missing"},
		{name: "none", exe: "usr/bin/orrery"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, append(tc.files, bin)...)
			l, err := Find(Config{Exe: filepath.Join(root, tc.exe), Ollama: "v1", Getenv: noEnv})
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if tc.wantDir != "" {
				want = filepath.Join(root, tc.wantDir)
			}
			if l.Dir != want || !strings.Contains(l.Problem, tc.problem) || (tc.problem == "") != (l.Problem == "") {
				t.Errorf("Find: dir %q, problem %q; want %q and a problem with %q", l.Dir, l.Problem, want, tc.problem)
			}
			if l.Usable() != (want != "" && tc.problem == "") {
				t.Errorf("Usable %v for %+v", l.Usable(), l)
			}
			if want != "" && (l.From != FromExecutable || !slices.Equal(l.Libs, []string{"vulkan"})) {
				t.Errorf("from %q, libs %v; want %q and [vulkan]", l.From, l.Libs, FromExecutable)
			}
			wantSearched := []string{filepath.Join(root, filepath.Dir(tc.exe), "../lib/orrery/lib/ollama")}
			if tc.wantDir != "usr/lib/orrery/lib/ollama" {
				wantSearched = append(wantSearched, filepath.Join(root, filepath.Dir(tc.exe), "../lib/ollama"))
			}
			if !slices.Equal(l.Searched, wantSearched) {
				t.Errorf("searched %q, want %q", l.Searched, wantSearched)
			}
		})
	}
}

// TestFindThroughLink: a link to the binary (/usr/local/bin/orrery to
// /opt/orrery/bin/orrery) finds the backends beside the binary itself.
func TestFindThroughLink(t *testing.T) {
	root := tree(t, backends("opt/orrery/lib/ollama", "v1"), map[string]string{"opt/orrery/bin/orrery": "exe", "usr/local/bin/.keep": ""})
	link := filepath.Join(root, "usr/local/bin/orrery")
	if err := os.Symlink(filepath.Join(root, "opt/orrery/bin/orrery"), link); err != nil {
		t.Fatal(err)
	}
	l, err := Find(Config{Exe: link, Ollama: "v1", Getenv: noEnv})
	if err != nil || l.Dir != filepath.Join(root, "opt/orrery/lib/ollama") || !l.Usable() {
		t.Errorf("Find through a link: %+v, %v", l, err)
	}
}

// TestFindNamed: a setting beats the environment, which beats the
// executable's neighbours; ollama's own variable is taken as it is.
func TestFindNamed(t *testing.T) {
	root := tree(t, backends("a/lib/ollama", "v1"), backends("b/lib/ollama", "v1"), backends("c/lib/ollama", "v1"),
		backends("lib/ollama", "v1"), map[string]string{"bin/orrery": "exe", "plain/libggml-vulkan.so": "elf"})
	exe := filepath.Join(root, "bin/orrery")
	a, b, c := filepath.Join(root, "a/lib/ollama"), filepath.Join(root, "b/lib/ollama"), filepath.Join(root, "c/lib/ollama")
	tests := []struct {
		name     string
		cfg      Config
		dir      string
		from     string
		errMatch string
	}{
		{name: "config", cfg: Config{LibDir: a, Getenv: env(LibEnv, b, OllamaLibEnv, c)}, dir: a, from: FromConfig},
		{name: "ORRERY_GPU_LIB", cfg: Config{Getenv: env(LibEnv, b, OllamaLibEnv, c)}, dir: b, from: FromLibEnv},
		{name: "OLLAMA_LIBRARY_PATH", cfg: Config{Getenv: env(OllamaLibEnv, c+string(filepath.ListSeparator)+a)}, dir: c, from: FromOllamaEnv},
		{name: "beside", cfg: Config{Getenv: noEnv}, dir: filepath.Join(root, "lib/ollama"), from: FromExecutable},
		{name: "no lib/ollama in the path", cfg: Config{Getenv: env(LibEnv, filepath.Join(root, "plain"))},
			errMatch: "takes only a path with lib/ollama in it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Exe, tc.cfg.Ollama = exe, "v1"
			l, err := Find(tc.cfg)
			if tc.errMatch != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errMatch) {
					t.Errorf("err %v, want one with %q", err, tc.errMatch)
				}
				return
			}
			if err != nil || l.Dir != tc.dir || l.From != tc.from || !l.Usable() {
				t.Errorf("Find: %+v, %v; want dir %s from %s", l, err, tc.dir, tc.from)
			}
		})
	}
}

// TestInspectDanglingLink: a backend linked into a cache since cleaned is
// no backend.
func TestInspectDanglingLink(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lib/ollama")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "gone.so"), filepath.Join(dir, "libggml-vulkan.so")); err != nil {
		t.Fatal(err)
	}
	l := Inspect(dir, "")
	if len(l.Libs) != 0 || !strings.Contains(l.Problem, "no GPU backend") {
		t.Errorf("Inspect: %+v, want no backend", l)
	}
	if got := (Library{Libs: []string{"cuda", "vulkan"}}).Files(); got != "libggml-cuda.so, libggml-vulkan.so" {
		t.Errorf("Files: %q", got)
	}
}
