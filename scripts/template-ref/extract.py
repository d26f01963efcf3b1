"""Writes <prefix>.jinja and <prefix>.tokens.json from a tokenizer_config.json."""
import json
import sys

cfg = json.load(open(sys.argv[1], encoding="utf-8"))
prefix = sys.argv[2]
tmpl = cfg["chat_template"]
if isinstance(tmpl, list):
    tmpl = next(t["template"] for t in tmpl if t["name"] == "default")
with open(prefix + ".jinja", "w", encoding="utf-8", newline="") as f:
    f.write(tmpl)
tokens = {}
for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
    v = cfg.get(k)
    if isinstance(v, dict):
        v = v.get("content")
    if isinstance(v, str):
        tokens[k] = v
with open(prefix + ".tokens.json", "w", encoding="utf-8") as f:
    json.dump(tokens, f, ensure_ascii=False, indent=1)
    f.write("\n")
