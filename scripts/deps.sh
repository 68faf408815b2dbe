#!/usr/bin/env bash
# Installs what building and testing Orrery need and this machine lacks.
# Debian/Ubuntu: apt packages are installed when running as root.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v gcc >/dev/null || need_apt+=(gcc libc6-dev)
# g++ compiles ggml's C++ (engine/backend/ggml, through cgo).
command -v g++ >/dev/null || need_apt+=(g++)
# ip (iproute2) builds the network namespaces of the netns tests.
command -v ip >/dev/null || need_apt+=(iproute2)
if ((${#need_apt[@]})); then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "deps: installing ${need_apt[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
	else
		echo "deps: missing ${need_apt[*]}; install them (apt-get install ${need_apt[*]})" >&2
		exit 1
	fi
fi
command -v go >/dev/null || { echo "deps: Go is missing; install Go 1.26 or newer" >&2; exit 1; }
go mod download
# The openai and Anthropic SDKs, zod and the ollama client drive the APIs in
# cmd/orrery's TestOpenAISDK, TestAnthropicSDK and TestOllamaClient.
command -v npm >/dev/null || { echo "deps: Node.js and npm are missing; install Node 20 or newer" >&2; exit 1; }
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
