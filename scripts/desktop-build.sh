#!/usr/bin/env bash
# Builds Orrery's desktop app (root main.go + app/, Wails and fyne.io/systray).
#
#   scripts/desktop-build.sh       bin/orrery-desktop for this OS (Linux here:
#                                  GTK 3 + WebKitGTK 4.0); also vets the
#                                  desktop-tagged code
#   scripts/desktop-build.sh app   macOS only: bin/Orrery.app, holding
#                                  Contents/MacOS/orrery-desktop (the app),
#                                  Contents/MacOS/orrery (the CLI, which model
#                                  runners are started with), Info.plist from
#                                  build/darwin and an icon from build/appicon.png.
#                                  Needs Xcode's command line tools. Not verified:
#                                  no Mac is available to developers or CI.
#
# On Debian/Ubuntu as root, missing build packages are installed.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
LDFLAGS="-X main.version=$VERSION"
# The same flags as the Makefile's, so that ggml's cgo build is cached.
eval "$(scripts/cgo-flags.sh --env)"
TAGS=desktop,production
# On Linux, Wails' webview passes requests' method, headers and body, and
# answers' status codes, only when built for WebKitGTK ≥ 2.40 (Debian 12
# has 2.50); without the tag every request reaches the agent as a bodiless
# GET and any status but 200 fails.
if [[ $(uname -s) == Linux ]]; then
	TAGS=$TAGS,webkit2_40
fi

linux_deps() {
	local need=()
	command -v gcc >/dev/null || need+=(gcc libc6-dev)
	command -v pkg-config >/dev/null || need+=(pkg-config)
	if ! command -v pkg-config >/dev/null || ! pkg-config --exists gtk+-3.0 ||
		! pkg-config --atleast-version=2.40 webkit2gtk-4.0; then
		need+=(libgtk-3-dev libwebkit2gtk-4.0-dev)
	fi
	((${#need[@]})) || return 0
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "desktop-build: installing ${need[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	else
		echo "desktop-build: missing ${need[*]}; install them (apt-get install ${need[*]})" >&2
		exit 1
	fi
}

build_app() {
	[[ $(uname -s) == Darwin ]] || { echo "desktop-build: 'app' builds a macOS .app and needs a Mac" >&2; exit 1; }
	local app=bin/Orrery.app
	local macos=$app/Contents/MacOS res=$app/Contents/Resources
	rm -rf "$app"
	mkdir -p "$macos" "$res"
	# What `wails build` adds on macOS 11+: the UTI framework, and a minimum
	# OS (13: Apple Silicon Macs with Metal 3).
	export CGO_ENABLED=1
	export CGO_CFLAGS="$CGO_CFLAGS -mmacosx-version-min=13.0"
	export CGO_LDFLAGS="${CGO_LDFLAGS:-} -framework UniformTypeIdentifiers -mmacosx-version-min=13.0"
	# Two names that differ by more than case: APFS is case-insensitive.
	"$GO" build -tags "$TAGS" -ldflags "$LDFLAGS" -o "$macos/orrery-desktop" .
	"$GO" build -ldflags "$LDFLAGS" -o "$macos/orrery" ./cmd/orrery
	cp build/darwin/Info.plist "$app/Contents/Info.plist"
	local iconset
	iconset=$(mktemp -d)/AppIcon.iconset
	mkdir -p "$iconset"
	for s in 16 32 128 256 512; do
		sips -z "$s" "$s" build/appicon.png --out "$iconset/icon_${s}x${s}.png" >/dev/null
		sips -z $((2 * s)) $((2 * s)) build/appicon.png --out "$iconset/icon_${s}x${s}@2x.png" >/dev/null
	done
	iconutil -c icns "$iconset" -o "$res/AppIcon.icns"
	rm -rf "$(dirname "$iconset")"
	# Ad-hoc signature over the bundle: arm64 code must be signed, and macOS
	# ties the Local Network permission to the bundle's identity.
	codesign --force --sign - "$macos/orrery"
	codesign --force --sign - "$app"
	echo "desktop-build: $app (open it, or copy it to /Applications)"
}

case "${1:-}" in
"")
	if [[ $(uname -s) == Linux ]]; then
		linux_deps
	fi
	"$GO" build -tags "$TAGS" -ldflags "$LDFLAGS" -o bin/orrery-desktop .
	"$GO" vet -tags "$TAGS" . ./app/
	echo "desktop-build: bin/orrery-desktop"
	;;
app) build_app ;;
*)
	echo "usage: scripts/desktop-build.sh [app]" >&2
	exit 2
	;;
esac
