#!/bin/sh
# After installing, upgrading or removing orrery-vulkan: systemd reads the
# unit's drop-in again, and a running agent restarts to load the backend
# (or to stop seeing it).
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	systemctl try-restart orrery.service >/dev/null 2>&1 || true
fi
exit 0
