package ggml

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orrery-cluster/orrery/engine/gpulib"
	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// GPU backends. ggml-cpu is compiled into the binary (and Metal too on
// macOS, through ollama's cgo); Vulkan and CUDA are shared libraries that
// `make gpu` builds (scripts/gpu-build.sh), or the orrery-vulkan package
// installs, and ollama's OnceLoad loads at the first ml.NewBackend from
// $OLLAMA_LIBRARY_PATH or, unset, from <executable's dir>/../lib/ollama.
// Setup points it at the directory engine/gpulib finds (the one answer,
// which the agent reports too) before that first call.

// Environment of the GPU backends.
const (
	// LibEnv names a directory holding the GPU backends (libggml-vulkan.so
	// and the libggml-base.so it links to; libggml-cuda.so): a test
	// binary, or an orrery not beside its lib/ollama.
	LibEnv = gpulib.LibEnv
	// ollamaLibEnv is where ollama's OnceLoad looks; it loads only from a
	// path with lib/ollama in it, or the executable's own directory.
	ollamaLibEnv = gpulib.OllamaLibEnv
	// vkVisibleEnv lists the Vulkan devices ggml uses, by index; unset, it
	// passes over a device of type CPU (Mesa's lavapipe).
	vkVisibleEnv = "GGML_VK_VISIBLE_DEVICES"
	// mesaCacheEnv is where Mesa keeps the pipelines lavapipe compiles on
	// first use (seconds to minutes each).
	mesaCacheEnv = "MESA_SHADER_CACHE_DIR"
	// lpThreadsEnv is how many threads lavapipe (llvmpipe) runs a
	// dispatch on. With its default, one per core, a rank's forward pass
	// on it came out wrong now and then (max |Δ|/std 0.3 to 5 against
	// the CPU's logits, where a right one is 0.004): 19 of 36 passes of
	// the tiny model, 48-token prompts, repeated in one process; with 1,
	// none of 54, over three shapes (f16 and f32 caches, flash attention
	// on and off, 1 and 4 sequences). ggml's Vulkan environment switches
	// (GGML_VK_DISABLE_ASYNC, _FUSION, _GRAPH_OPTIMIZE) did not help.
	lpThreadsEnv = "LP_NUM_THREADS"
)

// SetupConfig says where the GPU backends are and which devices they may
// use.
type SetupConfig struct {
	// LibDir holds the GPU backends ("": $ORRERY_GPU_LIB, else where the
	// executable finds them by itself: a package's ../lib/orrery/lib/ollama,
	// or a checkout's ../lib/ollama; gpulib.Find).
	LibDir string
	// Software makes a software Vulkan device (lavapipe) visible: sets
	// GGML_VK_VISIBLE_DEVICES=0 unless it is set. On a machine with a real
	// GPU as well, set GGML_VK_VISIBLE_DEVICES to the indices wanted. It
	// also runs lavapipe on one thread (LP_NUM_THREADS=1, unless set),
	// where its results are right.
	Software bool
	// Getenv and Setenv (nil: the process's) read and set the environment
	// ggml reads.
	Getenv func(string) string
	Setenv func(string, string) error
}

// SetupInfo says what Setup found: the directory the GPU backends load
// from ("": none), the backends in it ("vulkan", "cuda"), and why they
// cannot load (Problem, "" when nothing stops them).
type SetupInfo = gpulib.Library

// Setup prepares the environment ggml's GPU backends load with. It must
// run before the process's first backend (ollama loads them once), and
// only then: a runner, `orrery speed` and the other commands that compute
// call it first. Backends that cannot load (Problem: built from another
// ollama version, or no libggml-base.so.0 beside them), or none found,
// are not offered to ollama's loader at all: it would otherwise fall back
// to the executable's ../lib/ollama, which may be another ollama's.
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
	if cfg.Software && getenv(lpThreadsEnv) == "" {
		if err := setenv(lpThreadsEnv, "1"); err != nil {
			return SetupInfo{}, err
		}
	}
	info, err := gpulib.Find(gpulib.Config{LibDir: cfg.LibDir, Getenv: getenv})
	if err != nil {
		return info, err
	}
	switch {
	case info.From == gpulib.FromOllamaEnv:
		return info, nil // the user's own setting, as ollama reads it
	case info.Usable():
		return info, setenv(ollamaLibEnv, info.Dir)
	}
	// Set and empty: ollama's loader loads nothing.
	return info, setenv(ollamaLibEnv, "")
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
