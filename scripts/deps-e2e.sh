#!/usr/bin/env bash
# Installs what the UI's end-to-end test needs: Debian's Chromium (driven by
# playwright-core; never a downloaded browser).
set -euo pipefail
[[ -x /usr/bin/chromium ]] && exit 0
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
	echo "deps: installing chromium (for the UI's end-to-end test)"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
	echo "deps: /usr/bin/chromium is missing; install it (apt-get install chromium)" >&2
	exit 1
fi
