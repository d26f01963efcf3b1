// Regenerates testdata/tokenize/golden/models.jsonl: for each small
// tokenizer of testdata/tokenize/models.json, whether the HF Rust core loads
// it, and for every text its ids with and without special tokens, or that
// the encode failed. Run through generate.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(process.env.TOKENIZER_REF_CACHE, 'node_modules', 'tokenizers'));

async function encode(tok, text, addSpecialTokens) {
  try {
    return (await tok.encode(text, null, { addSpecialTokens })).getIds();
  } catch (e) {
    return null;
  }
}

async function main() {
  const dir = path.join(process.env.REPO_ROOT, 'testdata', 'tokenize');
  const spec = JSON.parse(fs.readFileSync(path.join(dir, 'models.json'), 'utf8'));
  const lines = [];
  for (const m of spec.models) {
    let tok;
    try {
      tok = Tokenizer.fromString(JSON.stringify(m.tokenizer));
    } catch (e) {
      lines.push(JSON.stringify({ model: m.name, load_error: true }));
      continue;
    }
    for (const text of spec.texts) {
      const ids = await encode(tok, text, false);
      const special = await encode(tok, text, true);
      lines.push(JSON.stringify({ model: m.name, text, ids, ids_special: special }));
    }
  }
  fs.writeFileSync(path.join(dir, 'golden', 'models.jsonl'), lines.join('\n') + '\n');
  console.error(`${spec.models.length} models, ${spec.texts.length} texts`);
}
main().catch((e) => { console.error(e); process.exit(1); });
