#!/usr/bin/env bash
# Build the upstream kube-apiserver (the wrapper module in this directory) into
# .cache/kube-apiserver/kube-apiserver for the integration tests of
# internal/testutil/kubeapi (`make test-kube`).
#
# A cold build downloads k8s.io/kubernetes and its dependencies from the Go
# module proxy and compiles them: about 15 minutes and 3 GB of RAM on two
# cores. The binary is rebuilt only when this module's sources or the Go
# toolchain change; a stamp next to the binary records what it was built from.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${KUBE_APISERVER_OUT:-$root/.cache/kube-apiserver}"
bin="$out/kube-apiserver"
go="${GO:-go}"

stamp="$(cd "$here" && cat go.mod go.sum main.go build.sh | sha256sum | cut -d' ' -f1) $("$go" env GOVERSION)"
if [[ -x "$bin" && -f "$bin.stamp" && "$(cat "$bin.stamp")" == "$stamp" ]]; then
  echo "kube-apiserver: up to date ($bin)"
  exit 0
fi

mkdir -p "$out"
echo "kube-apiserver: building $bin (a cold build takes about 15 minutes)"
start=$SECONDS
version=v1.37.2
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=37"
# The main module's GOFLAGS (e.g. -mod=readonly from .ci/run) apply here too;
# go.sum is complete, so a read-only build works.
(cd "$here" && CGO_ENABLED=0 "$go" build -trimpath -ldflags "$ldflags" -o "$bin.tmp" .)
mv "$bin.tmp" "$bin"
echo "$stamp" >"$bin.stamp"
echo "kube-apiserver: built in $((SECONDS - start)) s"
