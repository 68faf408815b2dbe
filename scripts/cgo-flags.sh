#!/usr/bin/env bash
# Prints the C flags ggml's cgo build gets.
#   scripts/cgo-flags.sh                 optimised for this CPU (the default)
#   scripts/cgo-flags.sh --env           export lines for CGO_CFLAGS and
#       CGO_CXXFLAGS (those already set are kept), for
#       `eval "$(scripts/cgo-flags.sh --env)"` before a hand-run go build or test
#   scripts/cgo-flags.sh --release ARCH  a portable set for release binaries
#       of GOARCH amd64 or arm64, whatever this machine is
# The Makefile and the scripts take the same, so ggml's build (about 4 minutes
# cold) is cached across them.
set -euo pipefail

if [[ ${1:-} == --release ]]; then
	case ${2:-} in
	# Haswell (2013) and later: what ggml's fast x86 paths need.
	amd64) echo "-O3 -mavx2 -mfma -mf16c" ;;
	# ARMv8.2 with dot products and half floats: Apple M1 and later,
	# Graviton 2+, Ampere, Raspberry Pi 5 (not the Pi 4's Cortex-A72).
	arm64) echo "-O3 -march=armv8.2-a+dotprod+fp16" ;;
	*)
		echo "cgo-flags: --release amd64|arm64" >&2
		exit 2
		;;
	esac
	exit 0
fi

case $(uname -s)/$(uname -m) in
# Apple clang targets the M1 by default for arm64 macOS, which is what ggml
# needs; -march=native is not Apple clang's.
Darwin/*) opt="-O3" ;;
# ggml-cpu.cpp lists AMX's buffer type when the compiler targets AMX, but
# ollama's Go package does not compile amx.cpp: on an AMX CPU (Xeon Sapphire
# Rapids and later) -march=native alone fails to link
# (undefined ggml_backend_amx_buffer_type).
*/x86_64) opt="-O3 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
*) opt="-O3 -march=native" ;;
esac
if [[ ${1:-} == --env ]]; then
	printf 'export CGO_CFLAGS=%q CGO_CXXFLAGS=%q\n' "${CGO_CFLAGS:-$opt}" "${CGO_CXXFLAGS:-$opt -DGGML_USE_CPU_REPACK}"
else
	echo "$opt"
fi
