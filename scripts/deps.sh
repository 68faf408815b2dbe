#!/usr/bin/env bash
# Installs what building and testing Orrery need and this machine lacks.
#   scripts/deps.sh          install what is missing where it can (apt, as root
#                            on Debian/Ubuntu), else say what and how, and fail
#   scripts/deps.sh --check  only list what is missing and how to get it
# On macOS it never installs a system package: it names the Homebrew formula
# or the Xcode step instead.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
[[ ${1:-} == --check ]] && check=1

os=$(uname -s)
missing=() # "what: how to get it"
need_apt=()
case $os in
Linux)
	# gcc for cgo (ggml, the race detector), g++ for ggml's C++.
	command -v gcc >/dev/null || need_apt+=(gcc libc6-dev)
	command -v g++ >/dev/null || need_apt+=(g++)
	# ip (iproute2) builds the network namespaces of the netns tests.
	command -v ip >/dev/null || need_apt+=(iproute2)
	# tmux gives orrery run's test (TestRunCommand) a real terminal.
	command -v tmux >/dev/null || need_apt+=(tmux)
	if ((${#need_apt[@]})); then
		if ((!check)) && [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
			echo "deps: installing ${need_apt[*]}"
			apt-get update -qq
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
		else
			missing+=("${need_apt[*]}: apt-get install ${need_apt[*]} (or your distribution's packages of the same)")
		fi
	fi
	command -v go >/dev/null || missing+=("Go 1.26 or newer: https://go.dev/dl/ (or your distribution's golang package, if new enough)")
	command -v npm >/dev/null || missing+=("Node.js 20 or newer with npm: apt-get install nodejs npm (Debian 13), or https://nodejs.org/")
	;;
Darwin)
	# clang (cgo, ggml with Metal) comes with the Xcode command-line tools.
	xcode-select -p >/dev/null 2>&1 || missing+=("the Xcode command-line tools (clang, the macOS SDK): xcode-select --install")
	command -v go >/dev/null || missing+=("Go 1.26 or newer: brew install go")
	command -v npm >/dev/null || missing+=("Node.js 20 or newer with npm: brew install node")
	;;
*)
	missing+=("a supported OS: Orrery builds on Linux and macOS, not on $os")
	;;
esac

if ((${#missing[@]})); then
	echo "deps: missing on this $os machine:" >&2
	printf '  - %s\n' "${missing[@]}" >&2
	exit 1
fi
if ((check)); then
	echo "deps: nothing missing for make build and make test on this $os machine"
	exit 0
fi

go mod download
# The openai and Anthropic SDKs, zod and the ollama client drive the APIs in
# cmd/orrery's TestOpenAISDK, TestAnthropicSDK and TestOllamaClient.
if [[ ! -f test/sdk/node_modules/.package-lock.json || test/sdk/package-lock.json -nt test/sdk/node_modules/.package-lock.json ]]; then
	echo "deps: npm ci in test/sdk (the API clients, for the API tests)"
	(cd test/sdk && npm ci --no-audit --no-fund --loglevel=error)
fi
# The web UI's build tools and unit tests (Svelte, Vite, vitest) and the
# browser driver of its end-to-end test (playwright-core).
if [[ ! -f frontend/node_modules/.package-lock.json || frontend/package-lock.json -nt frontend/node_modules/.package-lock.json ]]; then
	echo "deps: npm ci in frontend (the web UI's build tools)"
	(cd frontend && npm ci --no-audit --no-fund --loglevel=error)
fi
