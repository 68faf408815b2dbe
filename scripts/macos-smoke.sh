#!/usr/bin/env bash
# scripts/macos-smoke.sh BIN: the darwin sensor readers through a live agent
# on a Mac (macos.yml; written, not yet run: no Mac here). It starts an agent
# alone, waits for its samples and checks that the readers gave what a Mac
# has: memory, CPU use, GPU use and power (IOReport), a temperature (SMC or
# HID) and at least one network interface.
set -euo pipefail
[[ $(uname -s) == Darwin ]] || { echo "macos-smoke: needs a Mac" >&2; exit 1; }
bin=${1:?usage: scripts/macos-smoke.sh BIN}
dir=$(mktemp -d)
port=52999
"$bin" agent --data-dir "$dir" --mdns=false --peer-addr 127.0.0.1:0 --api-addr "127.0.0.1:$port" --speed off >"$dir/agent.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$dir"' EXIT
api=http://127.0.0.1:$port
for _ in $(seq 1 60); do
	curl -fs "$api/healthz" >/dev/null && break
	sleep 0.5
done
id=$(curl -fs "$api/node_id" | tr -d '"')
sleep 5 # several samples of each reader
fail() {
	echo "macos-smoke: FAIL: $*" >&2
	cat "$dir/agent.log" >&2
	exit 1
}
sys=$(curl -fs "$api/state/nodeSystem/$id") || fail "no nodeSystem"
mem=$(curl -fs "$api/state/nodeMemory/$id") || fail "no nodeMemory"
net=$(curl -fs "$api/state/nodeNetwork/$id") || fail "no nodeNetwork"
echo "nodeSystem: $sys"
echo "nodeMemory: $mem"
for key in cpuUsage gpuUsage sysPower temp; do
	grep -q "\"$key\":" <<<"$sys" || fail "nodeSystem has no $key"
done
grep -q '"ramTotal":[1-9]' <<<"$mem" || fail "no RAM total"
grep -q '"name":' <<<"$net" || fail "no network interface"
echo "macos-smoke: ok"
