#!/usr/bin/env bash
# Installs what the client-matrix drivers in test/clients need, on a Debian
# machine, as root: kcat (Debian package), kafkajs (npm ci against the
# committed lockfile) and confluent-kafka-python (a virtualenv); and Debian's
# chromium for the web console's browser test.
#
# Idempotent and quick when everything is in place: each step checks first
# and does nothing when its stamp matches. apt-get update runs only when a
# package must be installed and apt does not know it yet.
#
# Environment:
#   BATON_VENV  the virtualenv for the Python driver
#               (default: ${XDG_CACHE_HOME:-$HOME/.cache}/baton/venv,
#               the same default as clients.DefaultVenv)
#
# Java 17 (JDK, for javac) and Maven, for the Java driver and the real Apache
# Kafka harness (test/kafka/fetch.sh fetches the jars with them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${BATON_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/baton/venv}"

log() { printf 'install.sh: %s\n' "$*" >&2; }

sha() { sha256sum "$1" | cut -d' ' -f1; }

# apt_install PKG...: installs the Debian packages not installed yet.
apt_updated=0
apt_install() {
	local missing=()
	local p
	for p in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	[ "${#missing[@]}" -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		log "need root to apt-get install ${missing[*]}"
		return 1
	fi
	# Update the package lists only when apt cannot install them as it is.
	local need_update=0
	for p in "${missing[@]}"; do
		if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [^(]'; then
			need_update=1
		fi
	done
	if [ "$need_update" -eq 1 ] && [ "$apt_updated" -eq 0 ]; then
		log "apt-get update"
		apt-get update -qq
		apt_updated=1
	fi
	log "apt-get install -y ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# A JDK and Maven for the Java driver and the Apache Kafka harness.
if ! command -v java >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
	apt_install openjdk-17-jdk-headless
fi
if ! command -v mvn >/dev/null 2>&1; then
	apt_install maven
fi

# kcat (librdkafka) for the Kcat driver.
if ! command -v kcat >/dev/null 2>&1; then
	apt_install kcat
fi
command -v kcat >/dev/null 2>&1 || { log "kcat still missing after apt-get install"; exit 1; }

# Debian's chromium, for the web console's headless browser test
# (controlplane/console_test.go, driven by chromedp).
if ! command -v chromium >/dev/null 2>&1; then
	apt_install chromium
fi

# Node and npm, then kafkajs from the lockfile.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	apt_install nodejs npm
fi
js="$here/kafkajs"
stamp="$js/node_modules/.baton-lock-sha256"
want="$(sha "$js/package-lock.json")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -f "$js/node_modules/kafkajs/package.json" ]; then
	log "npm ci in $js"
	(cd "$js" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	printf '%s\n' "$want" >"$stamp"
fi

# Python virtualenv with confluent-kafka.
if ! command -v python3 >/dev/null 2>&1; then
	apt_install python3 python3-venv
fi
req="$here/python/requirements.txt"
stamp="$venv/.baton-requirements-sha256"
want="$(sha "$req")"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
	if [ ! -x "$venv/bin/python" ]; then
		log "python3 -m venv $venv"
		mkdir -p "$(dirname "$venv")"
		if ! python3 -m venv "$venv" 2>/dev/null; then
			# Debian splits venv (and its ensurepip) into python3-venv.
			rm -rf "$venv"
			apt_install python3-venv
			python3 -m venv "$venv"
		fi
	fi
	log "pip install -r $req into $venv"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
	"$venv/bin/python" -c 'import confluent_kafka' # fail here, not in a test
	printf '%s\n' "$want" >"$stamp"
fi

log "client matrix ready (kcat: $(command -v kcat), node: $(node --version), venv: $venv)"
