#!/usr/bin/env bash
# The router's own work per request, cold (BenchmarkCold in internal/router),
# of the working tree against another commit, in the same run: builds the
# router's test binary of each, then runs BenchmarkCold with the two in turn
# ROUNDS times (default 5) and prints each round and the means of own-µs
# (what the router adds to a request less what the floor adds). The same
# code built twice (any change to the binary moves its code about) differs
# by up to 1.5 µs in the means of two or three rounds, about 7 %: read a
# difference below that as noise, and take more rounds for a small change.
# The process-level comparison (bench-proxy.sh) cannot see changes this
# size at all.
#   scripts/bench-cold.sh BASE_REV [ROUNDS]    (BASE_REV must have BenchmarkCold)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
base=${1:?usage: scripts/bench-cold.sh BASE_REV [ROUNDS]}
rounds=${2:-5}
iters=${BENCH_COLD_ITERS:-2500}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/base" "$base" >/dev/null
if ! grep -q 'func BenchmarkCold' "$work/base/internal/router/bench_test.go"; then
  echo "bench-cold: $base has no BenchmarkCold" >&2
  exit 1
fi
echo "== building the router's test binaries: $base and the working tree"
(cd "$work/base" && go test -c -o "$work/base.test" ./internal/router)
go test -c -o "$work/tree.test" ./internal/router
for round in $(seq 1 "$rounds"); do
  for build in base tree; do
    "$work/$build.test" -test.run '^$' -test.bench '^BenchmarkCold$' -test.benchtime "${iters}x" |
      awk -v b="$build" -v r="$round" '/^BenchmarkCold/ { for (i = 1; i <= NF; i++) if ($i == "own-µs") printf "round %d  %-4s  %-28s own %6.2f µs\n", r, b, $1, $(i-1) }'
  done
done | tee "$work/rounds"
awk '{ k = $3 " " $4; s[k] += $6; n[k]++ } END { for (k in s) printf "mean  %-33s own %6.2f µs\n", k, s[k] / n[k] }' "$work/rounds" | sort -k3,3 -k2,2
