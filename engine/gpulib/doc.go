// Package gpulib finds ggml's GPU backends on this machine and says what
// keeps a node from computing on a GPU, in pure Go.
//
// ggml-cpu (and Metal on macOS) is compiled into the orrery binary; the
// Vulkan and CUDA backends are shared libraries that `make gpu` builds
// (scripts/gpu-build.sh) and the orrery-vulkan package installs, which
// ollama's loader dlopens at the first model a process loads. Find is the
// one answer to "which directory, which backends, and can they load":
// engine/backend/ggml's Setup points the loader at it before a runner's
// first model, and the agent (which has no cgo, and so cannot ask ggml)
// reports it, with the Vulkan drivers and PCI GPUs it sees and the
// devices its `orrery speed` listed, to `orrery doctor` (Report).
package gpulib
