#!/usr/bin/env bash
# The router's own work per request, cold (BenchmarkCold in internal/router),
# of the working tree against another commit, in the same run: builds the
# router's test binary of each, then runs BenchmarkCold with the two in turn
# ROUNDS times (default 5) and prints each round and the means of own-µs
# (what the router adds to a request less what the floor adds) and, where
# the build has them, its three parts: the lean server, the upstream client
# and plain relay, the router's logic. The same
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
      awk -v b="$build" -v r="$round" '/^BenchmarkCold/ {
        delete v
        for (i = 2; i <= NF; i++) v[$i] = $(i-1)
        parts = ""
        if ("server-µs" in v) parts = sprintf("  server %6.2f  client %6.2f  logic %6.2f", v["server-µs"], v["client-µs"], v["logic-µs"])
        printf "round %d  %-4s  %-28s own %6.2f µs%s\n", r, b, $1, v["own-µs"], parts
      }'
  done
done | tee "$work/rounds"
awk '{
  k = $3 " " $4; n[k]++
  for (i = 5; i < NF; i++) if ($i == "own" || $i == "server" || $i == "client" || $i == "logic") { sum[k, $i] += $(i+1); has[k, $i] = 1 }
} END {
  for (k in n) {
    line = sprintf("mean  %-33s own %6.2f µs", k, sum[k, "own"] / n[k])
    if (has[k, "server"]) line = line sprintf("  server %6.2f  client %6.2f  logic %6.2f", sum[k, "server"] / n[k], sum[k, "client"] / n[k], sum[k, "logic"] / n[k])
    print line
  }
}' "$work/rounds" | sort -k3,3 -k2,2
