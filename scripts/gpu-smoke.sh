#!/usr/bin/env bash
# The GPU smoke test: the tiny model's greedy logits with every block and
# the output head on a GPU against the same model on the CPU.
#
#   scripts/gpu-smoke.sh BIN LIBRARY [FLAGS...]
#
# BIN is an orrery binary, LIBRARY the ggml library the GPU run must have
# put the blocks on ("Metal" on a Mac, "Vulkan" on Linux); FLAGS go to both
# runs of orrery logits (--gpu-software on a machine whose only Vulkan
# device is lavapipe). macos.yml runs it on an Apple Silicon runner
# (never run yet: no Mac here).
#
# It fails unless orrery logits' "offload" says the GPU run put every block
# and the head on a LIBRARY device and the CPU run none, and the logits
# agree: the same greedy tokens (or a first difference at a near-tie, after
# which the runs' contexts differ and the comparison stops), each step's
# max |Δ| over the std of the CPU's logits within BOUND. The KV cache is f32
# on both, so that only the backends' kernels differ.
set -euo pipefail
bin=${1:?usage: scripts/gpu-smoke.sh BIN LIBRARY [FLAGS...]}
lib=${2:?usage: scripts/gpu-smoke.sh BIN LIBRARY [FLAGS...]}
shift 2
# The bound: a guess, until a Mac runs it. The CPU against itself across
# machines is 1.5e-6 with an f32 KV cache (dist-test.sh); ggml's GPU
# kernels sum in other orders and approximate exp and the like, and
# lavapipe's quantized products differ from the CPU's by ~3e-5 NMSE. The
# tiny model is F32: 1e-3 leaves room for that and catches a wrong kernel
# (a wrong result is off by the logits' whole spread).
bound=${GPU_SMOKE_BOUND:-1e-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" gen-model --preset tiny -o "$tmp/tiny.gguf" >/dev/null
run() { # run NAME GPU-LAYERS
	"$bin" logits --model "$tmp/tiny.gguf" --prompt-ids 1,17,33,2,250,7,91,400,12,5,300,64 --gen 16 --kv-type f32 \
		--gpu-layers "$2" "${@:3}" >"$tmp/$1.json"
}
run cpu 0 "$@"
# Above the model's blocks: all of them and the head, or an error.
run gpu 999 "$@"
python3 - "$tmp" "$lib" "$bound" <<'PY'
import json, statistics, sys
d, lib, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
cpu, gpu = (json.load(open(f"{d}/{n}.json")) for n in ("cpu", "gpu"))
o = gpu.get("offload") or {}
dev = o.get("device") or {}
assert dev.get("library") == lib and o.get("total", 0) > 0 and o.get("blocks") == o.get("total") and o.get("head"), \
    f"the GPU run's offload is {o}: want all blocks and the head on a {lib} device"
c = cpu.get("offload") or {}
assert not c.get("device") and not c.get("blocks"), f"the CPU run's offload is {c}: want none"
worst, steps = 0.0, 0
for i, (rc, rg) in enumerate(zip(cpu["logits"], gpu["logits"], strict=True)):
    std = statistics.pstdev(rc)
    err = max(abs(x - y) for x, y in zip(rc, rg, strict=True)) / std
    assert err <= bound, f"step {i}: logits max |Δ|/std {err:.3g} > {bound:g}"
    worst, steps = max(worst, err), i + 1
    tc, tg = cpu["tokens"][i], gpu["tokens"][i]
    if tc != tg:
        gap = (rc[tc] - rc[tg]) / std
        assert gap <= 2 * bound, f"step {i}: greedy tokens differ ({tc} on the CPU, {tg} on {lib}) by {gap:.3g} std, not a near-tie"
        print(f"gpu-smoke: step {i}: tokens differ at a near-tie ({gap:.3g} std); compared up to there")
        break
print(f"gpu-smoke: {dev.get('name')} ({dev.get('description')}), {o['blocks']}/{o['total']} blocks and the head, "
      f"against the CPU, tiny F32 model, KV cache f32: {steps} steps, logits max |Δ|/std {worst:.2e} (bound {bound:g}); "
      f"tokens {gpu['tokens'][:steps]}")
PY
