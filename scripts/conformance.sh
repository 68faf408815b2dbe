#!/usr/bin/env bash
# Runs the conformance tests against llama.cpp (installed by
# scripts/llama-ref.sh) verbosely, keeps the whole log in
# test-output/conformance.txt and prints the tables and the verdicts.
set -euo pipefail
cd "$(dirname "$0")/.."
# The flags make passes; others would rebuild ggml (minutes).
eval "$(scripts/cgo-flags.sh --env)"
mkdir -p test-output
log=test-output/conformance.txt
rc=0
pkgs=("$@")
((${#pkgs[@]})) || pkgs=(./engine/conformance/ ./engine/vocab/ ./engine/chattmpl/)
# 35 minutes: the conformance package alone takes about 8 on two cores, close to
# go test's default of 10; the GPU rows (TestGPUMatchesCPU) add 2-3 minutes
# once Mesa's shader cache is warm.
go test -count=1 -timeout 35m -v "${pkgs[@]}" 2>&1 | grep -v -e '^time=' -e ' INFO ' >"$log" || rc=$?
grep -E -e '^(--- |ok|FAIL|PASS|panic)' -e '^ +\|' -e '_test\.go:[0-9]+: ' "$log" || true
if [[ $rc -ne 0 ]]; then
	echo "conformance: failed; the whole log is in $log" >&2
	tail -n 40 "$log" >&2
	# Last, where a CI excerpt of the output's end shows them: what each
	# failed test printed from its _test.go lines and their continuations
	# (go test -v streams them between the test's === RUN and the next),
	# goal notes and tables left out.
	echo "conformance: the failures:" >&2
	awk '
		FNR == NR { if ($1 == "---" && $2 == "FAIL:") failed[$3] = 1; next }
		$1 == "===" && $2 == "RUN" { cur = $3; next }
		(cur in failed) && /_test\.go:[0-9]+: / && !/misses the goal/ { print cur ": " $0; more = 1; next }
		more && /^        / && !/^ +\|/ { print cur ": " $0; next }
		{ more = 0 }
		/^(panic|fatal error)/ { print }
	' "$log" "$log" | tail -n 80 >&2 || true
fi
exit "$rc"
