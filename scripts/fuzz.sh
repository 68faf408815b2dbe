#!/usr/bin/env bash
# Runs every fuzz target in the module for the given time each (default 10s).
# A run that fails only with "context deadline exceeded" (the fuzz engine
# missing its own deadline on a loaded machine, no failing input written) is
# run once more; any real failure fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		for try in 1 2; do
			echo "fuzz: $pkg $f ($t)"
			log=$(mktemp)
			if go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" -fuzzminimizetime 1s "$pkg" 2>&1 | tee "$log"; then
				rm -f "$log"
				break
			fi
			if [[ $try -eq 1 ]] && grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
				echo "fuzz: $f missed the fuzz engine's deadline (no failing input); running it again"
				rm -f "$log"
				continue
			fi
			rm -f "$log"
			exit 1
		done
	done
done
