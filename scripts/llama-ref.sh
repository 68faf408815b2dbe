#!/usr/bin/env bash
# Installs llama.cpp, Orrery's reference implementation, into a cache
# directory outside the repository and builds the tools the conformance
# tests call. Nothing of llama.cpp is kept in this repository: npm serves its
# source (node-llama-cpp's git bundle) and prebuilt libraries; the tools build
# against them with g++ in seconds, no cmake.
#
#   scripts/llama-ref.sh          install or update; prints the directory
#
# The directory is $ORRERY_LLAMA_REF, default ~/.cache/orrery/llama-ref:
#   llama.cpp/   the source (models/ggml-vocab-*.gguf, models/templates/)
#   bin/         libllama, libggml*, llama-tokenize, llama-quantize,
#                llama-bench, llama-batched-bench, llama-embedding,
#                llama-perplexity, llama-speculative,
#                orrery-llama-logits
#                (test/llamaref/logits.cpp)
# It also installs Debian's python3-jinja2 (as root; /usr/bin/python3), the chat-template
# reference.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
ver=3.22.1
dir=${ORRERY_LLAMA_REF:-${XDG_CACHE_HOME:-$HOME/.cache}/orrery/llama-ref}
mkdir -p "$dir"
log() { echo "llama-ref: $*" >&2; }
# The prebuilt libraries used here are node-llama-cpp's linux-x64 ones; on
# another OS or CPU there is no reference build wired in yet, so the
# conformance tests cannot run (macos.yml runs go test without them).
if [[ $(uname -s)/$(uname -m) != Linux/x86_64 ]]; then
	log "the llama.cpp reference is wired for Linux x86-64 only, not $(uname -s)/$(uname -m): make test's conformance part needs such a machine; make build and go test ./... do not"
	exit 1
fi

need_apt=()
command -v g++ >/dev/null || need_apt+=(g++)
command -v git >/dev/null || need_apt+=(git)
/usr/bin/python3 -c 'import jinja2' 2>/dev/null || need_apt+=(python3-jinja2)
if ((${#need_apt[@]})); then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		log "installing ${need_apt[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
	else
		log "missing ${need_apt[*]}; install them" && exit 1
	fi
fi

if [[ ! -f $dir/node_modules/node-llama-cpp/package.json ]] || ! grep -q "\"version\": \"$ver\"" "$dir/node_modules/node-llama-cpp/package.json"; then
	log "npm install node-llama-cpp@$ver (source and prebuilt libraries)"
	(cd "$dir" && [[ -f package.json ]] || echo '{"private":true}' >"$dir/package.json"
	 cd "$dir" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --omit=optional --no-audit --no-fund --ignore-scripts --loglevel=error \
		"node-llama-cpp@$ver" "@node-llama-cpp/linux-x64@$ver" >/dev/null)
	rm -rf "$dir/llama.cpp" "$dir/bin"
fi
if [[ ! -d $dir/llama.cpp/.git ]]; then
	log "unpacking llama.cpp's source"
	git clone -q "$dir/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$dir/llama.cpp" 2>/dev/null
fi

bin=$dir/bin
mkdir -p "$bin"
# llama.cpp loads the best CPU variant it finds beside its binaries. Its AMX
# one (sapphirerapids) is left out: ollama's ggml, Orrery's, builds no AMX
# kernels, so on an AMX CPU llama.cpp's repacked Q8_0, Q4_1 and F16 products
# would run other kernels than Orrery's and the matched conformance rows would
# compare different math (seen: 0.06-0.13 of a std). The next best variant
# (zen4 there) has the ISA Orrery's -march=native build has, less AMX. Its
# prompt speed on such a CPU is then below what llama.cpp reaches with AMX.
rm -f "$bin"/libggml-cpu-sapphirerapids.so
for f in "$dir"/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/*.so; do
	[[ $f == *-sapphirerapids.so ]] && continue
	ln -sf "$f" "$bin/$(basename "$f")"
done
src=$dir/llama.cpp
I="-DNDEBUG -I$src/include -I$src/ggml/include -I$src/common -I$src/vendor"
LIBS="-L$bin -l:libllama-common.so -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so -Wl,-rpath,\$ORIGIN -pthread"
build() { # build NAME SOURCES...
	local name=$1; shift
	local newest=0 f
	for f in "$@"; do [[ $f -nt $bin/$name ]] && newest=1; done
	[[ -x $bin/$name && $newest == 0 ]] && return
	log "building $name"
	# shellcheck disable=SC2086
	g++ -O2 -std=c++17 $I "$@" -o "$bin/$name" $LIBS
}
build llama-tokenize "$src/tools/tokenize/tokenize.cpp"
build llama-quantize -I"$src/tools/quantize" "$src"/tools/quantize/*.cpp
build llama-bench -I"$src/tools/llama-bench" "$src"/tools/llama-bench/*.cpp
build llama-batched-bench "$src"/tools/batched-bench/*.cpp
build llama-embedding "$src/examples/embedding/embedding.cpp"
build llama-perplexity "$src"/tools/perplexity/*.cpp
build llama-speculative "$src/examples/speculative/speculative.cpp"
build orrery-llama-logits "$repo/test/llamaref/logits.cpp"
build orrery-llama-vocab "$repo/test/llamaref/vocab.cpp"
echo "$dir"
