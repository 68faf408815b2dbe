#!/usr/bin/env bash
# Acceptance test of the desktop binary on Linux, under Xvfb and a private
# DBus session bus (dbus-run-session). Against a 3-node demo cluster
# (`orrery demo --no-chat`, which leaves a ring-benchmark trace), it starts
# `orrery-desktop --no-agent --api URL`, then:
#   - reads the tray menu over DBus (com.canonical.dbusmenu.GetLayout) and
#     checks the status lines, the items and the tray's title;
#   - clicks "Open Orrery" over DBus, checks the window is mapped and
#     screenshots the whole screen, which must not be blank (window.png);
#   - clicks "Open Latest Trace" and screenshots the trace page (trace.png);
#   - clicks "View Latest Trace in Perfetto": the agent must open its
#     /perfetto/<id> hand-off page (a stand-in xdg-open records the URL);
#   - toggles "Launch at Login" (the autostart file under a temporary HOME);
#   - clicks "Quit" and checks the app exits with 0.
# Then it starts orrery-desktop with its in-process agent, checks the menu
# and the agent's API, and quits it the same way.
# Artifacts go to test-output/desktop/ (screenshots, menu.txt, logs).
# Run as root on Debian/Ubuntu, it installs what it lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=test-output/desktop

fail() {
	echo "desktop-test: FAIL: $*" >&2
	exit 1
}

if [[ -z ${ORRERY_DESKTOP_TEST_IN_BUS:-} ]]; then
	need=()
	command -v Xvfb >/dev/null || need+=(xvfb)
	command -v dbus-run-session >/dev/null || need+=(dbus)
	command -v gdbus >/dev/null || need+=(libglib2.0-bin)
	command -v import >/dev/null && command -v identify >/dev/null && command -v compare >/dev/null || need+=(imagemagick)
	command -v xwininfo >/dev/null && command -v xdpyinfo >/dev/null || need+=(x11-utils)
	command -v curl >/dev/null || need+=(curl)
	if ((${#need[@]})); then
		if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
			echo "desktop-test: installing ${need[*]}"
			apt-get update -qq
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
		else
			fail "missing ${need[*]}; install them (apt-get install ${need[*]})"
		fi
	fi
	scripts/desktop-build.sh
	if [[ ! -x bin/orrery ]]; then
		echo "desktop-test: building bin/orrery"
		(eval "$(scripts/cgo-flags.sh --env)" && go build -o bin/orrery ./cmd/orrery)
	fi
	rm -rf "$OUT"
	mkdir -p "$OUT"
	# A private session bus: the tray registers there, whatever desktop
	# this runs on. The whole run is bounded.
	rc=0
	ORRERY_DESKTOP_TEST_IN_BUS=1 timeout 300 dbus-run-session -- bash "$0" "$@" || rc=$?
	((rc != 124)) || echo "desktop-test: FAIL: the test ran past 300s" >&2
	exit "$rc"
fi

# --- inside the private session bus ---
start=$(date +%s)
tmp=$(mktemp -d)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	for p in "$tmp"/demo/node-*/agent.log; do
		[[ -f $p ]] && cp "$p" "$OUT/demo-$(basename "$(dirname "$p")").log"
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# waitfor SECONDS WHAT COMMAND...: runs COMMAND every 0.25 s until it succeeds.
waitfor() {
	local secs=$1 what=$2
	shift 2
	local deadline=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) < deadline)) || fail "timed out after ${secs}s waiting for $what"
		sleep 0.25
	done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
	local p
	for p in $(seq "$1" $(($1 + 200))); do
		port_free "$p" && { echo "$p"; return; }
	done
	fail "no free port from $1"
}

# The display: the first free one from :90.
for n in $(seq 90 199); do
	[[ -e /tmp/.X11-unix/X$n || -e /tmp/.X$n-lock ]] || break
done
export DISPLAY=:$n
Xvfb "$DISPLAY" -screen 0 1280x900x24 -nolisten tcp -noreset >"$OUT/xvfb.log" 2>&1 &
pids+=($!)
waitfor 15 "Xvfb on $DISPLAY" xdpyinfo

# The desktop app's environment: a throwaway HOME (WebKit's caches, Launch
# at Login's file), and no accessibility bus.
mkdir -p "$tmp/home" "$tmp/run"
chmod 700 "$tmp/run"
export HOME=$tmp/home XDG_CONFIG_HOME=$tmp/home/.config XDG_RUNTIME_DIR=$tmp/run NO_AT_BRIDGE=1

P=$(free_port 52516)
API=http://127.0.0.1:$P
for i in 1 2; do port_free $((P + i)) || P=$(free_port $((P + 3))); done # the demo takes P..P+2
API=http://127.0.0.1:$P
# The agents open URLs with xdg-open: a stand-in records them instead.
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\necho "$@" >>"%s"\n' "$tmp/opened.txt" >"$tmp/fakebin/xdg-open"
chmod +x "$tmp/fakebin/xdg-open"
PATH=$tmp/fakebin:$PATH bin/orrery demo --no-chat --nodes 3 --base-port "$P" --dir "$tmp/demo" >"$OUT/demo.log" 2>&1 &
pids+=($!)
waitfor 60 "the demo's node 0 at $API" curl -fsS "$API/healthz"

# menu NAME: the tray's menu layout; item_id LABEL < layout: an item's id.
menu() {
	gdbus call --session --dest "$1" --object-path /StatusNotifierItem/menu \
		--method com.canonical.dbusmenu.GetLayout -- 0 -1 '[]'
}
item_id() {
	grep -oE "<\(([0-9]+), \{[^}]*'label': <'$1'>" | head -n1 | sed -E 's/^<\(([0-9]+),.*/\1/'
}
click() {
	[[ -n $2 ]] || fail "no such menu item (see $OUT/menu.txt)"
	gdbus call --session --dest "$1" --object-path /StatusNotifierItem/menu \
		--method com.canonical.dbusmenu.Event -- "$2" clicked '<"">' 0 >/dev/null
}
bus_has() {
	gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
		--method org.freedesktop.DBus.ListNames | grep -q "'$1'"
}
menu_has() { menu "$1" | grep -qE "$2"; }
# quit NAME PID WHAT: clicks Quit and waits for a clean exit.
quit() {
	local id rc=0
	id=$(menu "$1" | item_id Quit)
	[[ -n $id ]] || fail "$3: no Quit item"
	click "$1" "$id"
	for _ in $(seq 60); do kill -0 "$2" 2>/dev/null || break; sleep 0.25; done
	kill -0 "$2" 2>/dev/null && fail "$3: still running 15 s after Quit"
	wait "$2" || rc=$?
	[[ $rc -eq 0 ]] || fail "$3: exited with $rc after Quit"
}

# --- 1. attached to node 0 of the demo ---
bin/orrery-desktop --no-agent --api "$API" --log-level debug >"$OUT/desktop.log" 2>&1 &
dpid=$!
pids+=($dpid)
NAME=org.kde.StatusNotifierItem-$dpid-1 # fyne.io/systray's bus name; objects /StatusNotifierItem{,/menu}
waitfor 30 "the tray's DBus name $NAME" bus_has "$NAME"
# Refreshes replace the placeholder lines with the cluster's, once the
# nodes have met and the demo's ring benchmark has left its trace.
waitfor 60 "the menu's status lines for 3 nodes" menu_has "$NAME" "'Nodes: 3'"
waitfor 10 "the memory line" menu_has "$NAME" "'Memory: [0-9.]+ GB / [0-9.]+ GB used'"
waitfor 60 "the latest trace line" menu_has "$NAME" "'Latest trace: ring-"
menu "$NAME" >"$OUT/menu.txt"
for want in "Nodes: 3" "Memory: " "Runners: none" "Latest trace: ring-" "Open Orrery" "Open Latest Trace" \
	"View Latest Trace in Perfetto" "Copy API URL" "Launch at Login" "Quit"; do
	grep -qF "'$want" "$OUT/menu.txt" || fail "menu lacks '$want' (see $OUT/menu.txt)"
done
title=$(gdbus call --session --dest "$NAME" --object-path /StatusNotifierItem \
	--method org.freedesktop.DBus.Properties.Get org.kde.StatusNotifierItem Title)
[[ $title == "(<'3 nodes'>,)" ]] || fail "tray title $title, want '3 nodes'"

mapped() { xwininfo -name Orrery 2>/dev/null | grep -q 'Map State: IsViewable'; }
# The window exists from the start (StartHidden) but is not shown yet.
waitfor 20 "the window to be created" sh -c 'xwininfo -root -tree | grep -q "\"Orrery\""'
mapped && fail "the window shows before Open Orrery"
import -window root "$OUT/before.png"

click "$NAME" "$(item_id 'Open Orrery' <"$OUT/menu.txt")"
waitfor 20 "the window to be mapped after Open Orrery" mapped
xwininfo -root -tree | grep -i orrery >"$OUT/windows.txt"
# The page renders once the UI and its first /state have loaded: wait for
# a screen with many colours, then a moment for live data.
rendered() {
	import -window root "$tmp/shot.png" && (($(identify -format %k "$tmp/shot.png") > 64))
}
waitfor 30 "the window to draw the UI (more than 64 colours on screen)" rendered
sleep 3
import -window root "$OUT/window.png"
colours=$(identify -format %k "$OUT/window.png")
# compare prints the count of differing pixels on stderr, maybe as 1.05e+06.
changed=$(compare -metric AE "$OUT/before.png" "$OUT/window.png" null: 2>&1 | awk '{printf "%d", $1}' || true)
((colours > 64)) || fail "screenshot has $colours colours: blank window?"
((${changed:-0} > 100000)) || fail "only $changed pixels changed after Open Orrery"
echo "desktop-test: window shown: $colours colours, $changed pixels changed ($OUT/window.png)"

# Open Latest Trace moves the window to the trace's page.
click "$NAME" "$(item_id 'Open Latest Trace' <"$OUT/menu.txt")"
moved() {
	import -window root "$OUT/trace.png" &&
		(($(compare -metric AE "$OUT/window.png" "$OUT/trace.png" null: 2>&1 | awk '{printf "%d", $1}') > 10000))
}
waitfor 20 "the window to change after Open Latest Trace" moved
sleep 2
import -window root "$OUT/trace.png"
echo "desktop-test: latest trace shown ($OUT/trace.png)"

trace=$(grep -oE "'Latest trace: ring-[0-9]+" "$OUT/menu.txt" | sed "s/'Latest trace: //")
click "$NAME" "$(item_id 'View Latest Trace in Perfetto' <"$OUT/menu.txt")"
waitfor 15 "the agent to open the Perfetto page" grep -q "/perfetto/$trace" "$tmp/opened.txt"
grep -qx "http://127.0.0.1:$P/perfetto/$trace" "$tmp/opened.txt" || fail "opened $(cat "$tmp/opened.txt")"
echo "desktop-test: Perfetto hand-off page opened for $trace"

# Launch at Login writes, then removes, the XDG autostart entry.
login=$(item_id 'Launch at Login' <"$OUT/menu.txt")
autostart=$XDG_CONFIG_HOME/autostart/orrery.desktop
click "$NAME" "$login"
waitfor 10 "$autostart" test -f "$autostart"
waitfor 10 "the Launch at Login checkmark" menu_has "$NAME" "'toggle-state': <1>"
grep -q "^Exec=\"$PWD/bin/orrery-desktop\"$" "$autostart" || fail "autostart entry: $(cat "$autostart")"
click "$NAME" "$login"
waitfor 10 "$autostart to go" test ! -e "$autostart"

quit "$NAME" "$dpid" "orrery-desktop --no-agent"
echo "desktop-test: attached app: menu, window, latest trace, Perfetto, Launch at Login and Quit work"

# --- 2. with its in-process agent ---
P2=$(free_port $((P + 3)))
bin/orrery-desktop --api-addr "127.0.0.1:$P2" --peer-addr 127.0.0.1:0 --data-dir "$tmp/inproc" --mdns=false \
	>"$OUT/desktop-agent.log" 2>&1 &
dpid=$!
pids+=($dpid)
NAME=org.kde.StatusNotifierItem-$dpid-1
waitfor 30 "the in-process agent at :$P2" curl -fsS "http://127.0.0.1:$P2/healthz"
waitfor 30 "the tray's DBus name $NAME" bus_has "$NAME"
waitfor 20 "the in-process agent's status lines" menu_has "$NAME" "'Nodes: 1'"
# A second launch on the same data dir shows the first one's window and
# exits: no second tray icon, no second agent.
mapped && fail "the window shows before the second launch"
rc=0
timeout 20 bin/orrery-desktop --api-addr "127.0.0.1:$P2" --peer-addr 127.0.0.1:0 --data-dir "$tmp/inproc" --mdns=false \
	>"$OUT/desktop-second.log" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || fail "the second launch exited with $rc (see $OUT/desktop-second.log)"
grep -q "already running" "$OUT/desktop-second.log" || fail "the second launch did not defer to the first ($OUT/desktop-second.log)"
waitfor 20 "the first window to be mapped after the second launch" mapped
[[ $(gdbus call --session --dest org.freedesktop.DBus --object-path /org/freedesktop/DBus \
	--method org.freedesktop.DBus.ListNames | grep -o 'StatusNotifierItem-[0-9]*' | sort -u | wc -l) -eq 1 ]] ||
	fail "more than one tray item on the bus after the second launch"
echo "desktop-test: single instance: a second launch showed the first window and exited"
quit "$NAME" "$dpid" "orrery-desktop with its agent"
port_free "$P2" || fail "the in-process agent's port $P2 is still taken after Quit"
echo "desktop-test: in-process agent: up, shown in the menu, stopped on Quit"

echo "desktop-test: PASS in $(($(date +%s) - start))s; artifacts in $OUT/"
