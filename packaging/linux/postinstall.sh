#!/bin/sh
# After installing or upgrading orrery: its system user, then systemd's view
# of the unit, enabled and (re)started, as Ollama's installer does. The agent
# makes a cluster key at first start; other nodes join with `orrery key`.
set -e
if ! getent passwd orrery >/dev/null; then
	if command -v systemd-sysusers >/dev/null 2>&1; then
		systemd-sysusers /usr/lib/sysusers.d/orrery.conf
	else
		useradd --system --user-group --home-dir /var/lib/orrery --no-create-home \
			--shell /usr/sbin/nologin --comment "Orrery agent" orrery
	fi
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	systemctl enable orrery.service >/dev/null 2>&1 || true
	systemctl restart orrery.service >/dev/null 2>&1 || true
fi
exit 0
