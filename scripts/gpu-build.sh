#!/usr/bin/env bash
# Builds ggml's GPU backends as shared libraries from the pinned ollama
# module's own ggml source, caches them, and installs them where bin/orrery
# finds them by itself:
#
#   scripts/gpu-build.sh          build (or take from the cache) and install;
#                                 prints the directory the libraries are in
#   scripts/gpu-build.sh --key    prints the cache key and what it hashes,
#                                 building and installing nothing
#
# What it builds: libggml-base.so and libggml-vulkan.so, and libggml-cuda.so
# where nvcc is on PATH. Not the CPU backend: ggml-base and ggml-cpu are
# compiled into the Go binary by cgo already; ollama's OnceLoad
# (ml/backend/ggml/ggml/src/ggml.go in the module) dlopens the GPU backends
# from <dir of the executable>/../lib/ollama, or from OLLAMA_LIBRARY_PATH
# (which must contain "lib/ollama"). libggml-vulkan.so needs its own
# libggml-base.so beside it: both carry an RPATH of $ORIGIN. Beside them,
# orrery-gpu.txt names the ollama version they were built from: the binary
# (engine/gpulib) loads only backends of its own version.
#
# The build follows ollama's root CMakeLists.txt and CMakePresets.json
# (presets Vulkan and CUDA: Release, the root's GGML_* settings, target
# ggml-vulkan or ggml-cuda), on a copy of the module's source in the cache,
# since the module cache is read-only and the copy needs two fixes (below).
#
# The cache: ${XDG_CACHE_HOME:-~/.cache}/orrery/gpu/<key>/lib/ollama, where
# <key> hashes everything that makes the libraries differ: the module's
# version (and its replacement, if go.mod replaces it), the machine, the
# compilers (CC or gcc, CXX or g++, glslc, nvcc: each handed to CMake by
# path, so that the ones hashed are the ones used), cmake, the Vulkan
# headers ($VULKAN_SDK's, else the system's; handed to CMake too), the
# CMake flags and this script. The same key installs without building:
# <repo>/lib/ollama (ignored by git) becomes a link to the key's directory,
# swapped in by a rename. A lock per key (flock) lets two runs at once (CI
# and a developer) share one build: the second waits, then takes the cache.
# A key's directory unused for 30 days is removed by the next build.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
script=$repo/scripts/gpu-build.sh
log() { echo "gpu-build: $*" >&2; }
mode=build
case ${1:-} in
"") ;;
--key) mode=key ;;
*) log "usage: scripts/gpu-build.sh [--key]"; exit 2 ;;
esac
if [[ $(uname -s) != Linux ]]; then
	# On macOS, Metal is compiled into the binary by cgo (ggml_darwin_arm64.go).
	log "builds ggml's Vulkan and CUDA backends on Linux only, not on $(uname -s)"
	exit 1
fi

# The tools, by path: CMake gets the same ones the key hashes.
cc=$(command -v "${CC:-gcc}" || true)
cxx=$(command -v "${CXX:-g++}" || true)
cmake=$(command -v cmake || true)
# glslc compiles ggml-vulkan's shaders to SPIR-V at build time.
glslc=$(command -v glslc || true)
nvcc=$(command -v nvcc || true)
# CMake's FindVulkan prefers $VULKAN_SDK's headers to the system's.
vkinc=${VULKAN_SDK:+$VULKAN_SDK/include}
vkinc=${vkinc:-/usr/include}
vkhdr=$vkinc/vulkan/vulkan_core.h

if [[ $mode == build ]]; then
	need_apt=()
	[[ -n $cmake ]] || need_apt+=(cmake)
	[[ -n $cc ]] || need_apt+=(gcc)
	[[ -n $cxx ]] || need_apt+=(g++)
	[[ -n $glslc ]] || need_apt+=(glslc)
	[[ -f $vkhdr ]] || need_apt+=(libvulkan-dev)
	# lavapipe (Mesa's Vulkan on the CPU): a real Vulkan 1.3 device for
	# machines without a GPU, which the device tests (make gpu-test, make
	# test) run on; vulkaninfo --summary lists what the loader sees.
	compgen -G '/usr/share/vulkan/icd.d/lvp_icd.*.json' >/dev/null || need_apt+=(mesa-vulkan-drivers)
	command -v vulkaninfo >/dev/null || need_apt+=(vulkan-tools)
	command -v flock >/dev/null || need_apt+=(util-linux)
	if ((${#need_apt[@]})); then
		if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
			log "installing ${need_apt[*]}"
			apt-get update -qq
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
			cc=$(command -v "${CC:-gcc}") cxx=$(command -v "${CXX:-g++}") cmake=$(command -v cmake) glslc=$(command -v glslc)
		else
			log "missing ${need_apt[*]}; install them (apt-get install ${need_apt[*]})" && exit 1
		fi
	fi
else
	for t in cc cxx cmake glslc; do
		[[ -n ${!t} ]] || { log "--key: no $t here (make gpu installs it)"; exit 1; }
	done
	[[ -f $vkhdr ]] || { log "--key: no $vkhdr here (make gpu installs libvulkan-dev)"; exit 1; }
fi

read -r modver moddir modrepl < <(go list -m -f '{{.Version}} {{.Dir}} {{with .Replace}}{{.Path}}@{{.Version}}{{end}}' github.com/ollama/ollama)
vkver=$(awk '/^#define VK_HEADER_VERSION_COMPLETE/ {print $3, $4, $5, $6} /^#define VK_HEADER_VERSION / {print $3}' "$vkhdr" | tr '\n' ' ')

# ollama's root CMakeLists sets BUILD_SHARED_LIBS, GGML_BACKEND_DL and the
# other GGML_* options itself; these are the preset's (Release) and ours:
# the tools by path, the RPATH that lets the loader find libggml-base.so
# beside the backend (ollama's root sets one on Apple only), and no ccache.
flags=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_COMPILER=$cc" "-DCMAKE_CXX_COMPILER=$cxx"
	"-DVulkan_GLSLC_EXECUTABLE=$glslc" "-DVulkan_INCLUDE_DIR=$vkinc"
	'-DCMAKE_BUILD_RPATH=$ORIGIN' '-DCMAKE_INSTALL_RPATH=$ORIGIN'
	-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DGGML_CCACHE=OFF)
targets=(ggml-vulkan)
if [[ -n $nvcc ]]; then
	# Written after ollama's CUDA preset, never run here (this machine has
	# no nvcc): the plain "CUDA" preset sets no architectures, so ollama's
	# root CMakeLists picks "native" (the GPUs of the building machine),
	# which fits a build made on the machine that runs it. The libraries
	# libggml-cuda.so needs (cudart, cuBLAS) come from the CUDA toolkit's
	# own directories at run time, as for any CUDA program.
	targets+=(ggml-cuda)
	flags+=("-DCMAKE_CUDA_COMPILER=$nvcc")
else
	# Keep ollama's root CMakeLists from finding a CUDA compiler off PATH.
	flags+=(-DCMAKE_CUDA_COMPILER=)
fi
# ROCm is not built (no HIP target); an empty compiler keeps the root's
# check_language(HIP) from configuring it where ROCm is installed.
flags+=(-DCMAKE_HIP_COMPILER=)

inputs=$(
	echo "ollama $modver${modrepl:+ replaced by $modrepl}"
	echo "machine $(uname -m)"
	echo "cc $cc: $("$cc" --version | head -1)"
	echo "cxx $cxx: $("$cxx" --version | head -1)"
	"$cmake" --version | head -1
	"$glslc" --version | head -3
	[[ -z $nvcc ]] || "$nvcc" --version | tail -2
	echo "vulkan headers $vkhdr: $vkver"
	echo "flags ${flags[*]} targets ${targets[*]}"
	sha256sum <"$script"
)
key=$(sha256sum <<<"$inputs" | cut -c1-16)
if [[ $mode == key ]]; then
	echo "$key"
	echo "$inputs"
	exit 0
fi
[[ -n $moddir ]] || { log "go mod download first: github.com/ollama/ollama $modver is not in the module cache"; exit 1; }
cache=${XDG_CACHE_HOME:-$HOME/.cache}/orrery/gpu
out=$cache/$key
dest=$repo/lib/ollama
mkdir -p "$cache"

# One build per key at a time: a second run waits for the first, then
# finds its result. The lock is released when this script exits.
exec 9>"$cache/$key.lock"
if ! flock -n 9; then
	log "key $key: another run is building it; waiting"
	flock 9
fi
if [[ -f $out/done ]]; then
	log "key $key: cache hit ($out)"
	touch "$out/done"
else
	log "key $key: cache miss, building ${targets[*]} from ollama $modver (4 to 11 minutes on 2 cores)"
	start=$(date +%s)
	work=$cache/build-$key
	src=$work/src
	# A fresh copy each time the key is new; a failed build's copy and CMake
	# tree are kept, so that running again resumes it.
	if [[ ! -d $src ]]; then
		mkdir -p "$src/ml/backend/ggml"
		cp "$moddir/CMakeLists.txt" "$src/"
		cp -r "$moddir/ml/backend/ggml/ggml" "$src/ml/backend/ggml/"
		chmod -R u+w "$src"
		vk=$src/ml/backend/ggml/ggml/src/ggml-vulkan
		# The module leaves out ggml-vulkan's feature tests: CMake then takes
		# the missing file's error for support of every extension it tests
		# (coopmat, coopmat2, integer dot products, bfloat16) and the shaders
		# fail to compile. Each test is one #extension line.
		mkdir -p "$vk/vulkan-shaders/feature-tests"
		while read -r name ext; do
			printf '#version 460\n\n#extension %s : require\n\nvoid main()\n{\n}\n' "$ext" >"$vk/vulkan-shaders/feature-tests/$name.comp"
		done <<-'EOF'
			coopmat GL_KHR_cooperative_matrix
			coopmat2 GL_NV_cooperative_matrix2
			integer_dot GL_EXT_integer_dot_product
			bfloat16 GL_EXT_bfloat16
		EOF
		# Debian 12's Vulkan headers (1.3.239) lack VK_EXT_layer_settings,
		# which ggml_vk_instance_init uses to turn on the validation layer's
		# best practices (only with GGML_VULKAN_VALIDATE): without the
		# extension, the instance is created without those settings.
		sed -i \
			-e 's|^    VkBool32 enable_best_practice = layer_settings;$|#ifdef VK_EXT_layer_settings\n&|' \
			-e 's|^\(    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions\), &layer_setting_info);$|&\n#else\n\1);\n#endif|' \
			"$vk/ggml-vulkan.cpp"
		if [[ $(grep -c '^#ifdef VK_EXT_layer_settings$' "$vk/ggml-vulkan.cpp") != 1 ]] ||
			! grep -qxF '    vk::InstanceCreateInfo instance_create_info(vk::InstanceCreateFlags{}, &app_info, layers, extensions);' "$vk/ggml-vulkan.cpp"; then
			log "the VK_EXT_layer_settings patch did not apply to $vk/ggml-vulkan.cpp (has ollama's source changed?)"
			exit 1
		fi
	fi
	"$cmake" -S "$src" -B "$work/build" "${flags[@]}" >"$work/configure.log" 2>&1 ||
		{ log "cmake configure failed; see $work/configure.log"; tail -20 "$work/configure.log" >&2; exit 1; }
	grep -E 'GL_.* supported by glslc' "$work/configure.log" | sed 's/^-- /gpu-build: /' >&2 || true
	"$cmake" --build "$work/build" --parallel "$(nproc)" --target "${targets[@]}" >"$work/build.log" 2>&1 ||
		{ log "build failed; see $work/build.log"; tail -30 "$work/build.log" >&2; exit 1; }
	# Into a fresh directory, renamed into place only when complete: an
	# interrupted build never passes for a cached one.
	rm -rf "$out.tmp" && mkdir -p "$out.tmp/lib/ollama"
	# -a keeps libggml-base.so's versioned names: the backends need it by
	# its soname, libggml-base.so.0.
	cp -a "$work/build/lib/ollama"/libggml-* "$out.tmp/lib/ollama/"
	# ggml's loader says nothing when a backend fails to load (a release
	# build loads silently): catch a library it could not resolve here.
	for f in "$out.tmp/lib/ollama"/libggml-{vulkan,cuda}.so; do
		[[ -e $f ]] || continue
		if ldd "$f" | grep -q 'not found'; then
			log "$(basename "$f") would not load:"; ldd "$f" | grep 'not found' >&2; exit 1
		fi
	done
	# What engine/gpulib reads (its first line: the ollama version, which
	# must be the binary's), and what the key hashed.
	{
		echo "ollama $modver"
		echo "key $key"
		echo "$inputs"
	} >"$out.tmp/lib/ollama/orrery-gpu.txt"
	echo "$inputs" >"$out.tmp/inputs"
	touch "$out.tmp/done"
	rm -rf "$out" && mv "$out.tmp" "$out"
	rm -rf "$work"
	log "built in $(($(date +%s) - start)) s"
	# Other keys' builds unused for 30 days (each hit touches its done).
	find "$cache" -mindepth 2 -maxdepth 2 -name done -mtime +30 -printf '%h\n' | while read -r old; do
		[[ $old == "$out" ]] || { log "removing $old (unused for 30 days)"; rm -rf "$old" "$old.lock"; }
	done
fi

# lib/ollama becomes a link to the key's directory, renamed into place: a
# test or binary that reads it meanwhile sees the old set or the new one,
# never a half. (Before, it was a directory of links: replaced once.)
mkdir -p "$(dirname "$dest")"
[[ -L $dest || ! -d $dest ]] || rm -rf "$dest"
ln -sfn "$out/lib/ollama" "$dest.tmp.$$"
mv -Tf "$dest.tmp.$$" "$dest"
log "installed $(cd "$out/lib/ollama" && echo libggml-*) into $dest"
echo "$dest"
