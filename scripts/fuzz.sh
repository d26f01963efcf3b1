#!/usr/bin/env bash
# Runs every fuzz target for FUZZTIME (default 30s) and keeps the inputs that
# found new coverage in testdata/fuzz/<Target>/, where the fuzz tests read
# their seed corpus from.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-30s}
cache=$(go env GOCACHE)/fuzz
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "== $pkg $target ($fuzztime)"
    go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime"
    if [ -d "$cache/$pkg/$target" ]; then
      mkdir -p "testdata/fuzz/$target"
      cp -n "$cache/$pkg/$target"/* "testdata/fuzz/$target/" 2>/dev/null || true
    fi
  done
done
