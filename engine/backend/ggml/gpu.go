package ggml

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// GPU backends. ggml-cpu is compiled into the binary (and Metal too on
// macOS, through ollama's cgo); Vulkan and CUDA are shared libraries that
// `make gpu` builds (scripts/gpu-build.sh) and ollama's OnceLoad loads at
// the first ml.NewBackend, from $OLLAMA_LIBRARY_PATH or, unset, from
// <executable's dir>/../lib/ollama (so bin/orrery finds the repository's
// lib/ollama). Setup points it elsewhere before that first call.

// Environment of the GPU backends.
const (
	// LibEnv names a directory holding the GPU backends (libggml-vulkan.so
	// and the libggml-base.so it links to; libggml-cuda.so): a test
	// binary, or an orrery not beside its lib/ollama.
	LibEnv = "ORRERY_GPU_LIB"
	// ollamaLibEnv is where ollama's OnceLoad looks; it loads only from a
	// path with lib/ollama in it, or the executable's own directory.
	ollamaLibEnv = "OLLAMA_LIBRARY_PATH"
	// vkVisibleEnv lists the Vulkan devices ggml uses, by index; unset, it
	// passes over a device of type CPU (Mesa's lavapipe).
	vkVisibleEnv = "GGML_VK_VISIBLE_DEVICES"
	// mesaCacheEnv is where Mesa keeps the pipelines lavapipe compiles on
	// first use (seconds to minutes each).
	mesaCacheEnv = "MESA_SHADER_CACHE_DIR"
)

// SetupConfig says where the GPU backends are and which devices they may
// use.
type SetupConfig struct {
	// LibDir holds the GPU backends ("": $ORRERY_GPU_LIB, else where the
	// executable finds them by itself: ../lib/ollama, or a package's
	// ../lib/orrery/lib/ollama).
	LibDir string
	// Software makes a software Vulkan device (lavapipe) visible: sets
	// GGML_VK_VISIBLE_DEVICES=0 unless it is set. On a machine with a real
	// GPU as well, set GGML_VK_VISIBLE_DEVICES to the indices wanted.
	Software bool
	// Getenv and Setenv (nil: the process's) read and set the environment
	// ggml reads.
	Getenv func(string) string
	Setenv func(string, string) error
}

// SetupInfo says what Setup found.
type SetupInfo struct {
	// Dir is the directory the GPU backends load from ("": none found),
	// Libs the backends in it ("vulkan", "cuda").
	Dir  string
	Libs []string
	// Problem says why a backend there cannot load (a library missing
	// beside it), "" when none.
	Problem string
}

// Setup prepares the environment ggml's GPU backends load with. It must
// run before the process's first backend (ollama loads them once), and
// only then: a runner, `orrery speed` and the other commands that compute
// call it first.
func Setup(cfg SetupConfig) (SetupInfo, error) {
	getenv, setenv := cfg.Getenv, cfg.Setenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if setenv == nil {
		setenv = os.Setenv
	}
	if cfg.Software && getenv(vkVisibleEnv) == "" {
		if err := setenv(vkVisibleEnv, "0"); err != nil {
			return SetupInfo{}, err
		}
		if getenv(mesaCacheEnv) == "" {
			if dir, err := os.UserCacheDir(); err == nil {
				setenv(mesaCacheEnv, filepath.Join(dir, "orrery", "gpu", "mesa-shader-cache"))
			}
		}
	}
	dir := cfg.LibDir
	if dir == "" {
		dir = getenv(LibEnv)
	}
	if dir == "" && getenv(ollamaLibEnv) != "" {
		dir = getenv(ollamaLibEnv)
		return inspect(dir), nil
	}
	if dir == "" {
		dir = defaultLibDir()
		if dir == "" {
			return SetupInfo{}, nil
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return SetupInfo{}, fmt.Errorf("GPU backends %s: %w", dir, err)
	}
	if !strings.Contains(abs, filepath.FromSlash("lib/ollama")) {
		return SetupInfo{}, fmt.Errorf("GPU backends in %s: ollama's loader takes only a path with lib/ollama in it", abs)
	}
	if err := setenv(ollamaLibEnv, abs); err != nil {
		return SetupInfo{}, err
	}
	return inspect(abs), nil
}

// defaultLibDir is the first directory of GPU backends beside the
// executable: ../lib/ollama (a checkout's bin/orrery, as ollama's own
// default), then ../lib/orrery/lib/ollama (the .deb and .rpm's).
func defaultLibDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if e, err := filepath.EvalSymlinks(exe); err == nil {
		exe = e
	}
	for _, d := range []string{"../lib/ollama", "../lib/orrery/lib/ollama"} {
		p := filepath.Join(filepath.Dir(exe), d)
		if len(backendLibs(p)) > 0 {
			return p
		}
	}
	return ""
}

// backendLibs are the GPU backends in dir: "vulkan" for libggml-vulkan.so.
func backendLibs(dir string) []string {
	ms, _ := filepath.Glob(filepath.Join(dir, "libggml-*.so"))
	var out []string
	for _, m := range ms {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m), "libggml-"), ".so")
		if name != "base" && name != "cpu" && !strings.HasPrefix(name, "cpu-") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// inspect says which backends dir holds, and what keeps them from
// loading: ggml loads each silently, so a missing libggml-base.so.0 (their
// soname) would leave the GPU unseen without a word.
func inspect(dir string) SetupInfo {
	info := SetupInfo{Dir: dir, Libs: backendLibs(dir)}
	if len(info.Libs) == 0 {
		info.Problem = "no GPU backend (libggml-vulkan.so, libggml-cuda.so) in " + dir
		return info
	}
	if _, err := os.Stat(filepath.Join(dir, "libggml-base.so.0")); err != nil {
		info.Problem = "libggml-base.so.0, which the GPU backends link to, is missing from " + dir + " (run make gpu)"
	}
	return info
}

// errNoGPU is the reason given when no device was chosen.
var errNoGPU = errors.New("no GPU")

// pickDevice is the device a rank offloads to: the one with the most free
// memory among those allowed (a software one only with software), or the
// one whose id is id.
func pickDevice(ds []runnerapi.Device, software bool, id string) (runnerapi.Device, error) {
	var best runnerapi.Device
	found, skipped := false, 0
	for _, d := range ds {
		if d.Software && !software || id != "" && d.ID != id {
			skipped++
			continue
		}
		if !found || d.FreeBytes > best.FreeBytes {
			best, found = d, true
		}
	}
	switch {
	case found:
		return best, nil
	case id != "":
		return best, fmt.Errorf("%w: no device %q among ggml's %d (allowed: software %v)", errNoGPU, id, len(ds), software)
	case skipped > 0:
		return best, fmt.Errorf("%w: only a software device (%d; --gpu-software allows it)", errNoGPU, skipped)
	}
	return best, errNoGPU
}
