#!/usr/bin/env bash
# Runs every fuzz target in the module for the given time each (default 10s).
#
# Go 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" as -fuzztime ends (golang/go#75804, fixed in Go 1.27): a race in
# its shutdown, no failing input written. Such a run is tried again, up to 3
# times; if every try ends that way, the target's corpus is replayed with
# -run and must pass, and the script says so and goes on. Any other failure,
# and any failing input written, fails the script at once.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		ok=
		for try in 1 2 3; do
			echo "fuzz: $pkg $f ($t)"
			log=$(mktemp)
			if go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" -fuzzminimizetime 1s "$pkg" 2>&1 | tee "$log"; then
				rm -f "$log"
				ok=1
				break
			fi
			if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
				echo "fuzz: $f hit the fuzz coordinator's shutdown race (golang/go#75804; no failing input)"
				rm -f "$log"
				continue
			fi
			rm -f "$log"
			exit 1
		done
		if [[ -z $ok ]]; then
			echo "fuzz: $f: 3 tries ended in the shutdown race; replaying its corpus"
			go test -count=1 -run "^$f\$" "$pkg"
		fi
	done
done
