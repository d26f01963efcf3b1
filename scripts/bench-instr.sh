#!/usr/bin/env bash
# The work of one request on each path of BenchmarkPath (internal/router),
# counted in instructions and instruction cache misses by cachegrind rather
# than timed: one thread (GOMAXPROCS=1), no collector (GOGC=off), so that
# the counts move by a few hundred instructions between runs however loaded
# the machine is, where times move by tens of percent. Each path runs N and
# 2N requests; the difference, over N, is a request's own count, the
# setup's taken out. Counts cover the whole process: the client, the proxy
# on the path and the backend; "router - floor" is what the router does
# that a proxy that only relays does not. The instruction cache simulated
# is 32 KiB, 8-way (a current x86 core's L1i).
#
# Without an argument it counts the working tree; with BASE_REV it counts
# that commit too, in the same run, and prints both.
#   scripts/bench-instr.sh [BASE_REV]
# Environment: BENCH_INSTR_N (default 2000), BENCH_INSTR_COLD_N (default
# 200), BENCH_INSTR_PATHS (default "buffered/floor buffered/router
# sse/floor sse/router").
# Needs valgrind (installed through apt when missing, as bench-proxy.sh
# installs nginx).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
n=${BENCH_INSTR_N:-2000}
cold_n=${BENCH_INSTR_COLD_N:-200}
paths=${BENCH_INSTR_PATHS:-"buffered/floor buffered/router sse/floor sse/router"}
if ! command -v valgrind >/dev/null; then
  echo "== installing valgrind (apt)"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -qq valgrind >/dev/null
fi
work=$(mktemp -d)
trap 'git worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
builds=tree
go test -c -o "$work/tree.test" ./internal/router
if [ $# -ge 1 ]; then
  git worktree add --detach "$work/base" "$1" >/dev/null
  if ! grep -q 'func BenchmarkPath' "$work/base/internal/router/bench_test.go"; then
    echo "bench-instr: $1 has no BenchmarkPath" >&2
    exit 1
  fi
  (cd "$work/base" && go test -c -o "$work/base.test" ./internal/router)
  builds="base tree"
fi

# count BUILD PATH ITERS prints the instructions and I1 misses of the run.
count() {
  # Go reads the time stamp counter with RDTSCP where the CPU has it, an
  # instruction valgrind does not know: the runtime is told not to.
  GOMAXPROCS=1 GOGC=off GODEBUG=cpu.rdtscp=off valgrind --tool=cachegrind --cache-sim=yes \
    --I1=32768,8,64 --D1=49152,12,64 --LL=2097152,16,64 --cachegrind-out-file=/dev/null \
    "$work/$1.test" -test.run '^$' -test.bench "^BenchmarkPath\$/^${2%/*}\$/^${2#*/}\$" -test.benchtime "${3}x" 2>&1 |
    awk '/I *refs:/ {gsub(",", "", $NF); ir = $NF} /I1 *misses:/ {gsub(",", "", $NF); im = $NF} END {print ir, im}'
}

# count_cold BUILD PATH ITERS prints the LL misses of the run (a
# last-level cache of 2 MiB, smaller than the walk): code lines outside
# the runtime, code lines in it, and data lines. The runtime's share moves
# with its own threads' timing (the monitor, timers) by some tens of lines
# a request from run to run; the rest repeats within a few lines.
count_cold() {
  GOMAXPROCS=1 GOGC=off GODEBUG=cpu.rdtscp=off valgrind --tool=cachegrind --cache-sim=yes \
    --I1=32768,8,64 --D1=49152,12,64 --LL=2097152,16,64 --cachegrind-out-file="$work/cold.out" \
    "$work/$1.test" -test.run '^$' -test.bench "^BenchmarkPathCold\$/^${2%/*}\$/^${2#*/}\$" -test.benchtime "${3}x" >/dev/null 2>&1
  awk '/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i; next }
    /^fn=/ { rt = substr($0, 4) ~ /^(runtime\.|internal\/runtime\/|aeshash|memeqbody|indexbytebody|countbody|cmpbody|gogo|mcall|morestack)/; next }
    /^[0-9]/ { if (rt) irt += $col["ILmr"]; else iown += $col["ILmr"]; d += $col["DLmr"] }
    END { print iown, irt, d }' "$work/cold.out"
}
# walk_lines is what one walk of evictBuf misses: one line per 64 bytes.
walk_lines=$(((16 << 20) / 64))
if ! grep -q 'evictBuf = make(\[\]byte, 16<<20)' internal/router/bench_test.go; then
  echo "bench-instr: evictBuf is no longer 16 MiB; update walk_lines" >&2
  exit 1
fi

declare -A ir im il ilrt dl
for b in $builds; do
  for p in $paths; do
    read -r ir1 im1 < <(count "$b" "$p" "$n")
    read -r ir2 im2 < <(count "$b" "$p" $((2 * n)))
    ir[$b,$p]=$(((ir2 - ir1) / n))
    im[$b,$p]=$(((im2 - im1) / n))
    printf '%-5s %-16s %8d instructions  %6d I1 misses per request\n' "$b" "$p" "${ir[$b,$p]}" "${im[$b,$p]}"
  done
done
for b in $builds; do
  if [ "$b" = base ] && ! grep -q 'func BenchmarkPathCold' "$work/base/internal/router/bench_test.go"; then
    echo "base  has no BenchmarkPathCold: cold lines of the working tree only"
    continue
  fi
  for p in $paths; do
    read -r io1 ir1 dl1 < <(count_cold "$b" "$p" "$cold_n")
    read -r io2 ir2 dl2 < <(count_cold "$b" "$p" $((2 * cold_n)))
    il[$b,$p]=$(((io2 - io1) / cold_n))
    ilrt[$b,$p]=$(((ir2 - ir1) / cold_n))
    dl[$b,$p]=$(((dl2 - dl1) / cold_n - walk_lines))
    printf '%-5s %-16s cold: %6d code lines (and %d in the runtime)  %6d data lines from memory per request\n' \
      "$b" "$p" "${il[$b,$p]}" "${ilrt[$b,$p]}" "${dl[$b,$p]}"
  done
done
for b in $builds; do
  for mode in buffered sse; do
    if [ -n "${ir[$b,$mode/router]:-}" ] && [ -n "${ir[$b,$mode/floor]:-}" ]; then
      printf '%-5s %-8s router - floor: %7d instructions  %6d I1 misses per request\n' "$b" "$mode" \
        $((ir[$b,$mode/router] - ir[$b,$mode/floor])) $((im[$b,$mode/router] - im[$b,$mode/floor]))
    fi
    if [ -n "${il[$b,$mode/router]:-}" ] && [ -n "${il[$b,$mode/floor]:-}" ]; then
      printf '%-5s %-8s router - floor, cold: %6d code lines outside the runtime  %6d data lines per request\n' "$b" "$mode" \
        $((il[$b,$mode/router] - il[$b,$mode/floor])) $((dl[$b,$mode/router] - dl[$b,$mode/floor]))
    fi
  done
done
