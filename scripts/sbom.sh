#!/usr/bin/env bash
# scripts/sbom.sh BINARY OUT.cdx.json: a CycloneDX SBOM of a Go binary from
# the build information Go writes into it (its modules and versions), by
# cyclonedx-gomod, pinned in tools/release.mod. goreleaser's sboms step calls it
# from dist/.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: scripts/sbom.sh BINARY OUT.cdx.json" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "$1")
out=$(realpath -m "$2")
cd "$root"
go tool -modfile=tools/release.mod cyclonedx-gomod bin -json -licenses=false -output "$out" "$bin"
