#!/usr/bin/env bash
# Build the upstream kube-apiserver (the wrapper module in this directory) for
# the integration tests of internal/testutil/kubeapi (`make test-kube`), into
#   ${CONTINUUM_CACHE:-$HOME/.cache/continuum}/kube-apiserver-<version>/kube-apiserver
# outside the clone, so that it outlives it; <version> is the k8s.io/kubernetes
# version this module's go.mod requires (internal/testutil/kubeapi looks there
# by the same rule). The upstream kubectl of the same version (the module's
# tool) goes beside it, for the tests that drive scripts through kubectl.
# KUBE_APISERVER_OUT overrides the directory; then point
# CONTINUUM_KUBE_APISERVER at the server (and CONTINUUM_KUBECTL at kubectl).
#   scripts/kube-apiserver/build.sh          build unless up to date
#   scripts/kube-apiserver/build.sh --path   print the binary's path, build nothing
#
# A cold build downloads k8s.io/kubernetes and its dependencies from the Go
# module proxy and compiles them: about 15 minutes and 3 GB of RAM on two
# cores (kubectl adds about 2, most of its packages being the server's). The
# binaries are rebuilt only when this module's sources or the Go toolchain
# change; a stamp next to the server records what both were built from.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v[0-9]/ { print $2; exit }' "$here/go.mod")"
if [[ ! "$version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]]; then
  echo "kube-apiserver: no k8s.io/kubernetes vX.Y.Z requirement in $here/go.mod (found '$version')" >&2
  exit 1
fi
major="${BASH_REMATCH[1]}" minor="${BASH_REMATCH[2]}"
cache="${CONTINUUM_CACHE:-${HOME:?HOME or CONTINUUM_CACHE must be set}/.cache/continuum}"
out="${KUBE_APISERVER_OUT:-$cache/kube-apiserver-$version}"
bin="$out/kube-apiserver"
case "${1:-}" in
  --path) echo "$bin"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--path]" >&2; exit 2 ;;
esac
go="${GO:-go}"

stamp="$(cd "$here" && cat go.mod go.sum main.go build.sh | sha256sum | cut -d' ' -f1) $("$go" env GOVERSION)"
kubectl="$out/kubectl"
if [[ -x "$bin" && -x "$kubectl" && -f "$bin.stamp" && "$(cat "$bin.stamp")" == "$stamp" ]]; then
  echo "kube-apiserver: up to date ($bin)"
  exit 0
fi

mkdir -p "$out"
echo "kube-apiserver: building $bin and $kubectl (a cold build takes about 15 minutes)"
start=$SECONDS
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=$major"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
# The main module's GOFLAGS (e.g. -mod=readonly from .ci/run) apply here too;
# go.sum is complete, so a read-only build works. The binary is written next
# to its final name and renamed, so another clone never runs half a file.
trap 'rm -f "$bin.tmp.$$" "$kubectl.tmp.$$"' EXIT
(cd "$here" && CGO_ENABLED=0 "$go" build -trimpath -ldflags "$ldflags" -o "$bin.tmp.$$" .)
(cd "$here" && CGO_ENABLED=0 "$go" build -trimpath -ldflags "$ldflags" -o "$kubectl.tmp.$$" k8s.io/kubernetes/cmd/kubectl)
mv "$bin.tmp.$$" "$bin"
mv "$kubectl.tmp.$$" "$kubectl"
echo "$stamp" >"$bin.stamp"
echo "kube-apiserver: built in $((SECONDS - start)) s"
