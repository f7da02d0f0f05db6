#!/usr/bin/env bash
# Installs what the chaos suite (test/chaos) needs besides the client matrix:
# iptables, to cut an agent's network namespace off from the control plane.
# ip(8) and ss(8) come with iproute2. A no-op when iptables is in place.
set -euo pipefail

command -v iptables >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "install.sh: need root to apt-get install iptables (the chaos suite falls back to a relay without it)" >&2
	exit 0
fi
echo "install.sh: apt-get install -y iptables" >&2
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null
fi
