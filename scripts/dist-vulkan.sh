#!/usr/bin/env bash
# The orrery-vulkan packages (.deb and .rpm, amd64): ggml's Vulkan backend
# for the orrery package of the same VERSION, which goreleaser runs as a
# before hook (.goreleaser.yaml) and publishes beside it:
#
#   scripts/dist-vulkan.sh VERSION    into .cache/dist-vulkan/
#
# A package of its own, not in orrery's: the backend is 30 MB (the main
# .deb is a few), it needs libvulkan1, which a headless CPU server need not
# have, and a GPU node installs it in one command. It holds what make gpu
# builds (scripts/gpu-build.sh: libggml-vulkan.so, the libggml-base.so.0
# it links to, orrery-gpu.txt naming their ollama version) in
# /usr/lib/orrery/lib/ollama, where /usr/bin/orrery finds them by itself
# (engine/gpulib). It depends on orrery of exactly VERSION: the backend and
# the ggml compiled into the binary must come from the same ollama. A
# drop-in for orrery.service (packaging/linux/orrery-vulkan.conf) lets the
# service see the GPU devices its PrivateDevices would hide.
#
# amd64 only: arm64 would need the backend cross-built (an arm64 Vulkan
# loader and headers beside the aarch64 compilers, and ggml's shader
# generator built for the host), which is not done; an arm64 node runs
# on its CPU. goreleaser's own nfpm cannot make this package (it puts a
# binary in each), so nfpm runs here, pinned with it in tools/release.mod.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/dist-vulkan.sh VERSION}
out=.cache/dist-vulkan
log() { echo "dist-vulkan: $*" >&2; }
[[ $(uname -m) == x86_64 ]] || { log "builds the amd64 package on an x86-64 machine, not $(uname -m)"; exit 1; }
# The version as nfpm writes it into a package (goreleaser's for orrery
# too): a semver pre-release goes after "~", which dpkg and rpm order
# before the release (0.0.0-dev.abc1234: 0.0.0~dev.abc1234). The
# dependency on orrery must name that form.
pkgver=${version/-/\~}
lib=$(scripts/gpu-build.sh)
rm -rf "$out" && mkdir -p "$out/stage"
for f in libggml-vulkan.so libggml-base.so.0 orrery-gpu.txt; do
	[[ -f $lib/$f ]] || { log "make gpu left no $f in $lib"; exit 1; }
	cp -L "$lib/$f" "$out/stage/$f"
done
# A CUDA build beside it (where nvcc is) stays out: it is built for this
# machine's GPUs, not for others'.
cat >"$out/nfpm.yaml" <<YAML
name: orrery-vulkan
arch: amd64
platform: linux
version: "$version"
section: net
priority: optional
maintainer: Orrery maintainers <orrery@users.noreply.github.com>
vendor: Orrery
homepage: https://github.com/orrery-cluster/orrery
description: |-
  ggml's Vulkan backend for orrery: its runners compute on the node's GPU
  through Vulkan (AMD, Intel, NVIDIA) where a Vulkan driver is installed.
  Without a GPU, Mesa's lavapipe (mesa-vulkan-drivers) is a software
  device orrery uses only with --gpu-software.
depends:
  - orrery (= $pkgver)
  - libvulkan1
  - libc6
  - libstdc++6
  - libgcc-s1
suggests:
  - mesa-vulkan-drivers
overrides:
  rpm:
    depends:
      - orrery = $pkgver
      - libvulkan.so.1()(64bit)
      - glibc
      - libstdc++
      - libgcc
contents:
  - src: $out/stage/libggml-vulkan.so
    dst: /usr/lib/orrery/lib/ollama/libggml-vulkan.so
    file_info: {mode: 0644}
  - src: $out/stage/libggml-base.so.0
    dst: /usr/lib/orrery/lib/ollama/libggml-base.so.0
    file_info: {mode: 0644}
  - src: $out/stage/orrery-gpu.txt
    dst: /usr/lib/orrery/lib/ollama/orrery-gpu.txt
    file_info: {mode: 0644}
  - src: packaging/linux/orrery-vulkan.conf
    dst: /usr/lib/systemd/system/orrery.service.d/orrery-vulkan.conf
    file_info: {mode: 0644}
scripts:
  postinstall: packaging/linux/vulkan-postinstall.sh
  postremove: packaging/linux/vulkan-postinstall.sh
deb:
  compression: xz
rpm:
  compression: xz
YAML
for p in deb rpm; do
	go tool -modfile=tools/release.mod nfpm package --config "$out/nfpm.yaml" --packager "$p" --target "$out/" >&2
done
rm -rf "$out/stage" "$out/nfpm.yaml"
ls "$out"
