#!/usr/bin/env bash
# The process-level proxy comparison (make bench runs it; make bench-proxy
# runs it alone): builds continuum and scripts/bench-proxy into
# $CONTINUUM_CACHE/bench-proxy, installs Debian's nginx through apt when
# there is none, then drives one fast OpenAI-shaped backend directly, through
# `continuum serve` and through nginx with vegeta at fixed arrival rates, and
# prints the table (markdown) that the README quotes. The JSON and the table
# land beside the binaries, named by the time of the run.
#   scripts/bench-proxy.sh [bench-proxy run flags: -rates 500,1000,2000 -duration 6s -rounds 3 ...]
#   scripts/bench-proxy.sh -baseline OTHER_CONTINUUM   (a fourth path: the build before a change)
# Figures are ratios and differences against the direct path measured in the
# same run; on a machine busy with other work they move from run to run, so
# the load average is printed with them.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
cache="${CONTINUUM_CACHE:-${HOME:?HOME or CONTINUUM_CACHE must be set}/.cache/continuum}/bench-proxy"
mkdir -p "$cache"

nginx=$(command -v nginx || true)
[[ -z "$nginx" && -x /usr/sbin/nginx ]] && nginx=/usr/sbin/nginx
if [[ -z "$nginx" ]]; then
  echo "== apt-get install nginx"
  sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  # Only the binary is used: the run starts its own nginx with its own
  # configuration in a temporary directory.
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends nginx
  nginx=/usr/sbin/nginx
fi

module=github.com/continuum-router/continuum
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
echo "== go build continuum ($version) and bench-proxy into $cache"
go build -trimpath -ldflags "-s -w -X $module/internal/cli.version=$version -X $module/internal/cli.commit=$commit" \
  -o "$cache/continuum" ./cmd/continuum
go build -trimpath -o "$cache/bench-proxy" ./scripts/bench-proxy

stamp=$(date -u +%Y%m%dT%H%M%SZ)
"$cache/bench-proxy" run -continuum "$cache/continuum" -nginx "$nginx" -label "$version" \
  -json "$cache/result-$stamp.json" "$@" | tee "$cache/result-$stamp.md"
