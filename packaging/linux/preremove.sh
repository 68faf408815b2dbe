#!/bin/sh
# Before removing orrery: stop and disable the service. Its data in
# /var/lib/orrery (node id, cluster key, models) stays.
set -e
if [ -d /run/systemd/system ]; then
	systemctl disable --now orrery.service >/dev/null 2>&1 || true
fi
exit 0
