#!/usr/bin/env bash
# make dist: the Linux release artifacts as a snapshot into dist/ (goreleaser,
# pinned in tools/release.mod, with .goreleaser.yaml): tarballs, .deb and .rpm for
# amd64 and arm64, the orrery-vulkan .deb and .rpm for amd64 (ggml's Vulkan
# backend: scripts/dist-vulkan.sh, a goreleaser hook), checksums and CycloneDX
# SBOMs. arm64 cross-compiles cgo and ggml with Debian's aarch64 cross
# compilers, installed here when missing (as root on Debian). A tagged release
# runs the same config in release.yml.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(uname -s) == Linux ]] || { echo "dist: the Linux artifacts build on Linux (the macOS .app: make app on a Mac)" >&2; exit 1; }
need=()
command -v gcc >/dev/null || need+=(gcc g++)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
if ((${#need[@]})); then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "dist: installing ${need[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	else
		echo "dist: missing ${need[*]}; install them (apt-get install ${need[*]})" >&2
		exit 1
	fi
fi
ORRERY_CGO_AMD64=$(scripts/cgo-flags.sh --release amd64)
ORRERY_CGO_ARM64=$(scripts/cgo-flags.sh --release arm64)
ORRERY_SNAPSHOT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
export ORRERY_CGO_AMD64 ORRERY_CGO_ARM64 ORRERY_SNAPSHOT
# The Vulkan backend first, where its progress shows (4 to 11 minutes the
# first time; cached after): goreleaser's hook then takes it from the cache.
scripts/gpu-build.sh >/dev/null
# A snapshot: no tag needed, nothing published.
go tool -modfile=tools/release.mod goreleaser release --snapshot --clean "$@"
# goreleaser checksummed orrery-vulkan where the hook left it; beside the
# rest, checksums.txt checks in dist/ (make dist-test).
cp .cache/dist-vulkan/orrery-vulkan* dist/
