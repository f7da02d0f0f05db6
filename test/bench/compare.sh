#!/usr/bin/env bash
# compare.sh REV: the agent-vs-direct benchmark with a third column, the
# agent built from git revision REV, measured in the same run on the same
# clusters as this tree's agent: a before-and-after of a change to the data
# path. Prints the benchmark's tables.
set -euo pipefail

rev="${1:?usage: compare.sh REV (a commit, tag or branch)}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
short="$(git rev-parse --short "$rev^{commit}")"
work="$(mktemp -d -t baton-bench-XXXXXX)"
trap 'git worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

git worktree add --detach "$work/tree" "$short" >/dev/null
(cd "$work/tree" && go build -o "$work/baton-$short" ./cmd/baton)

export BATON_BENCH_BASELINE_BIN="$work/baton-$short"
export BATON_BENCH_BASELINE_NAME="agent@$short"
go test -run '^$' -bench AgentVsDirect -benchtime 1x -timeout 30m ./test/bench/
