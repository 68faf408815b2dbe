#!/usr/bin/env bash
# Prints the C flags ggml's cgo build gets by default: optimised for this CPU.
# With --env, prints export lines for CGO_CFLAGS and CGO_CXXFLAGS (those already
# set are kept), for `eval "$(scripts/cgo-flags.sh --env)"` before a hand-run go
# build or test. The Makefile and the scripts take the same, so ggml's build
# (about 4 minutes cold) is cached across them.
set -euo pipefail
opt="-O3 -march=native"
# ggml-cpu.cpp lists AMX's buffer type when the compiler targets AMX, but
# ollama's Go package does not compile amx.cpp: on an AMX CPU (Xeon Sapphire
# Rapids and later) -march=native alone fails to link
# (undefined ggml_backend_amx_buffer_type).
if [[ $(uname -m) == x86_64 ]]; then
	opt+=" -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
fi
if [[ ${1:-} == --env ]]; then
	printf 'export CGO_CFLAGS=%q CGO_CXXFLAGS=%q\n' "${CGO_CFLAGS:-$opt}" "${CGO_CXXFLAGS:-$opt -DGGML_USE_CPU_REPACK}"
else
	echo "$opt"
fi
