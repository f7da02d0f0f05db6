#!/usr/bin/env bash
# fetch.sh [--mirror] [VERSION]
#
# Makes sure Apache Kafka's jars are in Baton's cache and prints the folder
# holding them (and nothing else on stdout).
#
#   fetch.sh            broker, tools and client at pom.xml's kafka.version
#                       -> $BATON_CACHE/kafka-<version>/libs
#   fetch.sh --mirror   MirrorMaker 2 at pom.xml's mirror.version
#                       -> $BATON_CACHE/mirror-<version>/libs
#   VERSION             overrides the pom's version.
#
# BATON_CACHE defaults to $HOME/.cache/baton. Idempotent: a marker file
# (<folder>/../complete) records the version and pom.xml's hash, and while it
# matches Maven is not run at all. Concurrent runs are serialised by flock.
# Needs only bash, java and mvn (Maven Central is the only source).
# Exit codes: 0 done, 2 usage, 3 mvn or java missing, 1 anything else.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pom=$here/pom.xml

kind=kafka
prop=kafka.version
mvn_extra=()
if [[ ${1:-} == --mirror ]]; then
	kind=mirror
	prop=mirror.version
	mvn_extra=(-Dmirror)
	shift
fi
if [[ $# -gt 1 || ${1:-} == -* ]]; then
	echo "usage: fetch.sh [--mirror] [VERSION]" >&2
	exit 2
fi

version=${1:-$(sed -n "s:.*<$prop>\([^<]*\)</$prop>.*:\1:p" "$pom" | head -n 1)}
if [[ -z $version || $version == */* ]]; then
	echo "fetch.sh: no usable $prop (got '$version')" >&2
	exit 2
fi

cache=${BATON_CACHE:-${HOME:?HOME is not set}/.cache/baton}
base=$cache/$kind-$version
libs=$base/libs
marker=$base/complete
want="$version $(sha256sum "$pom" | cut -d' ' -f1)"

complete() { [[ -f $marker && $(<"$marker") == "$want" && -d $libs ]]; }

if complete; then
	echo "$libs"
	exit 0
fi

mkdir -p "$base"
# Serialise concurrent fetches (two test packages at once share ~/.m2).
if command -v flock >/dev/null; then
	exec 9>"$cache/.fetch.lock"
	flock 9
	if complete; then
		echo "$libs"
		exit 0
	fi
fi

for tool in mvn java; do
	if ! command -v "$tool" >/dev/null; then
		echo "fetch.sh: $tool is not installed; it is needed to fetch Kafka $version's jars into $libs" >&2
		exit 3
	fi
done

stage=$(mktemp -d "$base/libs.tmp.XXXXXX")
trap 'rm -rf "$stage"' EXIT

echo "fetch.sh: fetching $kind $version jars from Maven Central into $libs" >&2
# mvn -q prints its errors on stdout: keep stdout for the answer alone
# (and drop the colour codes Maven 3.8 prints even with -B).
if ! mvn -B -q -Dstyle.color=never -f "$pom" "${mvn_extra[@]}" \
	"-D$prop=$version" "-Dbaton.libs=$stage" \
	dependency:copy-dependencies 2>&1 | sed 's/\x1b\[[0-9;]*m//g' 1>&2; then
	echo "fetch.sh: mvn dependency:copy-dependencies failed for $kind $version (see above)" >&2
	exit 1
fi

case $kind in
kafka) check=kafka_2.13-$version.jar ;;
mirror) check=connect-mirror-$version.jar ;;
esac
if [[ ! -f $stage/$check ]]; then
	echo "fetch.sh: mvn finished but $check is missing from $stage" >&2
	exit 1
fi

rm -rf "$libs"
mv "$stage" "$libs"
trap - EXIT
echo "$want" >"$marker"
echo "$libs"
