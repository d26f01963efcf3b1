#!/usr/bin/env bash
# Runs every fuzz target for FUZZTIME (default 30s), one after the other.
# Each target's seed corpus is <package>/testdata/fuzz/<Target>/, which plain
# `go test` also runs. An input that fails is written there by `go test
# -fuzz` itself, so it stays a regression case once committed; the script
# stops at the first failing target.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-30s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== $pkg $target ($fuzztime)"
    go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime"
  done
done
