#!/usr/bin/env bash
# Where each proxy's CPU goes under the proxy comparison's own load: runs
# `bench-proxy run` with the floor (one round by default) under
# `perf record -a -g` (every process on the machine, cpu-clock, since
# virtual machines often have no hardware counters), then splits the
# samples of continuum, nginx and the floor into system calls, Go's
# scheduler, allocation, the collector, start-up and the rest, with
# continuum's costliest functions (bench-proxy split). continuum is built
# with its symbols for this (bench-proxy.sh strips them).
#   scripts/bench-perf.sh [bench-proxy run flags: -rates 2000 -modes buffered ...]
# Needs perf (Debian's linux-perf, installed through apt when missing) and
# the right to sample the whole machine (root, or kernel.perf_event_paranoid
# at -1). The report lands beside bench-proxy.sh's, named by the time of
# the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
cache="${CONTINUUM_CACHE:-${HOME:?HOME or CONTINUUM_CACHE must be set}/.cache/continuum}/bench-proxy"
mkdir -p "$cache"
sudo=()
[[ $(id -u) -ne 0 ]] && sudo=(sudo)
if ! command -v perf >/dev/null; then
  echo "== apt-get install linux-perf"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends linux-perf
fi
nginx=$(command -v nginx || true)
[[ -z "$nginx" && -x /usr/sbin/nginx ]] && nginx=/usr/sbin/nginx
if [[ -z "$nginx" ]]; then
  echo "bench-perf: no nginx; scripts/bench-proxy.sh installs it" >&2
  exit 1
fi
hz=1999
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== go build continuum (with symbols) and bench-proxy into $work"
go build -o "$work/continuum" ./cmd/continuum
go build -o "$work/bench-proxy" ./scripts/bench-proxy
stamp=$(date -u +%Y%m%dT%H%M%SZ)
echo "== perf record -a -g -F $hz over bench-proxy run -floor -rounds 1 $*"
"${sudo[@]}" perf record -q -a -g -e cpu-clock -F "$hz" -o "$work/perf.data" -- \
  "$work/bench-proxy" run -continuum "$work/continuum" -nginx "$nginx" -floor -rounds 1 -label "perf $(git rev-parse --short HEAD 2>/dev/null || echo dev)" "$@" \
  > "$work/run.md"
"${sudo[@]}" perf script -i "$work/perf.data" -F comm,pid,ip,sym 2>/dev/null |
  "$work/bench-proxy" split -hz "$hz" | tee "$cache/perf-$stamp.md"
echo "report: $cache/perf-$stamp.md (the run's own table: below)"
cat "$work/run.md"
