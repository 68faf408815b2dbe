package gpulib

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
)

// Environment and files of the GPU backends.
const (
	// LibEnv names a directory holding the GPU backends: a test binary's
	// (make test sets it to the repository's lib/ollama), or an orrery's
	// that is not beside them.
	LibEnv = "ORRERY_GPU_LIB"
	// RequiredEnv, set (make test and CI set it to 1), turns a test that
	// needs the GPU backends or a device and lacks them from a skip into
	// a failure (gpulibtest.Lib).
	RequiredEnv = "ORRERY_GPU_REQUIRED"
	// OllamaLibEnv is where ollama's loader looks (a list of directories,
	// each with lib/ollama in its path); unset, it looks in the
	// executable's ../lib/ollama.
	OllamaLibEnv = "OLLAMA_LIBRARY_PATH"
	// MarkerFile, beside backends make gpu built, names the ollama version
	// they were built from on its first line ("ollama v0.17.4").
	MarkerFile = "orrery-gpu.txt"

	ollamaModule = "github.com/ollama/ollama"
)

// Where a Library's directory came from.
const (
	FromConfig     = "config" // Config.LibDir
	FromLibEnv     = LibEnv
	FromOllamaEnv  = OllamaLibEnv
	FromExecutable = "beside the executable"
)

// besideExe are the directories, relative to the executable's own, that
// hold the GPU backends of an orrery that was not told where: a
// package's (/usr/bin/orrery: /usr/lib/orrery/lib/ollama) first, then a
// checkout's (bin/orrery: lib/ollama, also ollama's own default). The
// package's comes first because /usr/lib/ollama may be a system ollama's.
var besideExe = []string{"../lib/orrery/lib/ollama", "../lib/ollama"}

// Library is where the GPU backends load from, and what keeps them from
// loading.
type Library struct {
	// Dir holds the backends ("": none found), From says how it was
	// chosen (FromConfig, FromLibEnv, FromOllamaEnv, FromExecutable).
	Dir  string `json:"dir,omitempty"`
	From string `json:"from,omitempty"`
	// Libs are the backends in Dir: "vulkan" for libggml-vulkan.so,
	// "cuda" for libggml-cuda.so.
	Libs []string `json:"libs,omitempty"`
	// Ollama is the ollama version they were built from (MarkerFile; ""
	// when it is not there).
	Ollama string `json:"ollama,omitempty"`
	// Problem says why they cannot load ("": nothing stops them).
	Problem string `json:"problem,omitempty"`
	// Searched are the directories looked in beside the executable, when
	// neither a setting nor the environment named one.
	Searched []string `json:"searched,omitempty"`
}

// Usable reports whether there are backends and nothing keeps them from
// loading.
func (l Library) Usable() bool { return l.Dir != "" && len(l.Libs) > 0 && l.Problem == "" }

// Files names the backends' files: "libggml-vulkan.so, libggml-cuda.so".
func (l Library) Files() string {
	var fs []string
	for _, b := range l.Libs {
		fs = append(fs, "libggml-"+b+".so")
	}
	return strings.Join(fs, ", ")
}

// Config says where to look.
type Config struct {
	// LibDir, when set, is the directory (a flag's); else $ORRERY_GPU_LIB,
	// else $OLLAMA_LIBRARY_PATH's first, else beside Exe.
	LibDir string
	// Exe is the orrery binary the backends are for ("": this process's).
	Exe string
	// Ollama is the ollama version the binary was built with ("": this
	// process's, from its build information; none there: not checked).
	Ollama string
	// Getenv reads the environment (nil: the process's).
	Getenv func(string) string
}

// Find looks for the GPU backends as a runner would load them. The error
// is for a directory named by a setting or by LibEnv that ollama's loader
// would refuse (its path lacks lib/ollama); a directory that holds no
// backend, or backends that cannot load, is a Library with a Problem.
func Find(cfg Config) (Library, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	want := cfg.Ollama
	if want == "" {
		want = BuildOllama()
	}
	named := func(dir, from string) (Library, error) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return Library{From: from}, fmt.Errorf("GPU backends %s: %w", dir, err)
		}
		if !strings.Contains(abs, filepath.FromSlash("lib/ollama")) {
			return Library{Dir: abs, From: from}, fmt.Errorf("GPU backends in %s (%s): ollama's loader takes only a path with lib/ollama in it", abs, from)
		}
		l := Inspect(abs, want)
		l.From = from
		return l, nil
	}
	if cfg.LibDir != "" {
		return named(cfg.LibDir, FromConfig)
	}
	if d := getenv(LibEnv); d != "" {
		return named(d, FromLibEnv)
	}
	if d := getenv(OllamaLibEnv); d != "" {
		// The user's own setting, which the loader reads as it is.
		l := Inspect(filepath.SplitList(d)[0], want)
		l.From = FromOllamaEnv
		return l, nil
	}
	exe := cfg.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return Library{}, fmt.Errorf("GPU backends: %w", err)
		}
	}
	if e, err := filepath.EvalSymlinks(exe); err == nil {
		exe = e
	}
	var searched []string
	var foreign Library
	for _, rel := range besideExe {
		d := filepath.Join(filepath.Dir(exe), rel)
		searched = append(searched, d)
		l := Inspect(d, want)
		if len(l.Libs) == 0 {
			continue
		}
		l.From = FromExecutable
		if l.Ollama == "" {
			// Not make gpu's nor the package's: another ollama's, whose
			// ggml may not match the binary's, or an older make gpu's.
			if foreign.Dir == "" {
				foreign = l
				foreign.Problem = "no " + MarkerFile + " beside the GPU backends in " + d +
					": not built for orrery (another ollama's, or an older make gpu's: run make gpu), so not loaded"
			}
			continue
		}
		l.Searched = searched
		return l, nil
	}
	foreign.Searched = searched
	return foreign, nil
}

// Inspect says which backends dir holds, and what keeps them from loading
// with a binary of ollama version want ("": not checked). ggml loads each
// silently, so a missing libggml-base.so.0 (their soname) would leave the
// GPU unseen without a word, and backends of another ggml version could
// crash the process.
func Inspect(dir, want string) Library {
	l := Library{Dir: dir, Libs: backendLibs(dir), Ollama: markerOllama(dir)}
	switch {
	case len(l.Libs) == 0:
		l.Problem = "no GPU backend (libggml-vulkan.so, libggml-cuda.so) in " + dir
	case !exists(filepath.Join(dir, "libggml-base.so.0")):
		l.Problem = "libggml-base.so.0, which the GPU backends link to, is missing from " + dir + " (run make gpu)"
	case want != "" && l.Ollama != "" && l.Ollama != want:
		l.Problem = fmt.Sprintf("the GPU backends in %s were built from ollama %s, this orrery from %s: they cannot load together (run make gpu; from packages, install the orrery-vulkan of orrery's version)",
			dir, l.Ollama, want)
	}
	return l
}

// backendLibs are the GPU backends in dir: "vulkan" for libggml-vulkan.so.
func backendLibs(dir string) []string {
	ms, _ := filepath.Glob(filepath.Join(dir, "libggml-*.so"))
	var out []string
	for _, m := range ms {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "libggml-"), ".so")
		if name != "base" && name != "cpu" && !strings.HasPrefix(name, "cpu-") && exists(m) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// exists reports whether path is there, following links (a dangling one,
// into a cache since cleaned, is not).
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// markerOllama is the version on MarkerFile's first line in dir ("": no
// such file).
func markerOllama(dir string) string {
	f, err := os.Open(filepath.Join(dir, MarkerFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return ""
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "ollama ")
	if !ok {
		return ""
	}
	return v
}

// BuildOllama is the version of ollama's module this binary was built
// with ("" when it has none: an orrery_omit_engine build, or a test of a
// package that does not link ggml).
func BuildOllama() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == ollamaModule {
			return d.Version
		}
	}
	return ""
}
