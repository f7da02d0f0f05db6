#!/usr/bin/env bash
# run.sh RUNS SEED [DURATION]: runs TestChaos RUNS times from SEED (empty:
# from the clock) and ends with its one summary line; exits non-zero when any
# run broke an invariant. `make chaos RUNS=N SEED=S` calls it.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
runs="${1:-5}" seed="${2:-}" dur="${3:-}"
log="$(mktemp -t baton-chaos-XXXXXX.log)"

export BATON_CHAOS_RUNS="$runs"
[ -n "$seed" ] && export BATON_CHAOS_SEED="$seed"
[ -n "$dur" ] && export BATON_CHAOS_DURATION="$dur"
cd "$root"
# -v streams the timeline; the summary line is held back and printed last.
go test -race -count=1 -v -run '^TestChaos$' -timeout 0 ./test/chaos/ 2>&1 | tee "$log" | grep --line-buffered -v '^chaos: [0-9]* runs, '
rc=${PIPESTATUS[0]}
echo "(full output: $log)" >&2
summary="$(grep '^chaos: [0-9]* runs, ' "$log" | tail -1)"
if [ -z "$summary" ]; then
	echo "chaos: $runs runs, 0 acked, 0 lost, 0 reordered, 0 duplicates, 0 fatal, max stall 0.0s (the suite did not finish; see the output)" 
	exit 1
fi
echo "$summary"
exit "$rc"
