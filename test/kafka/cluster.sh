#!/usr/bin/env bash
# cluster.sh up|down|status [--brokers 1|3] [--port FIRST] [--dir DIR]
#            [--partitions N] [--version V] [--heap 512m] [--config key=value]...
#
# A real Apache Kafka KRaft cluster on 127.0.0.1 for hand testing: 1 or 3
# nodes, each a combined broker and controller JVM. `up` formats fresh
# storage, starts the nodes detached, waits until Metadata lists every broker
# and prints the bootstrap list (only that, on stdout); `down` stops them
# (SIGTERM, SIGKILL after a grace) by their recorded pids; `status` describes
# them and exits 0 only if every broker answers. DIR (default
# $TMPDIR/baton-kafka) holds cluster.json and node-<id>/{server.properties,
# server.log,data}. Jars come from Maven Central through fetch.sh.
#
# This is a front end over the Go package (cmd/kafkacluster), which owns the
# one server.properties template; it needs the Go toolchain, and builds the
# command into $BATON_CACHE/bin (default ~/.cache/baton/bin) each run (a
# no-op when nothing changed).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bindir=${BATON_CACHE:-${HOME:?HOME is not set}/.cache/baton}/bin
mkdir -p "$bindir"
tmp=$(mktemp "$bindir/kafkacluster.XXXXXX")
trap 'rm -f "$tmp"' EXIT
go -C "$repo" build -o "$tmp" ./test/kafka/cmd/kafkacluster
mv -f "$tmp" "$bindir/kafkacluster"
trap - EXIT
exec "$bindir/kafkacluster" "$@"
