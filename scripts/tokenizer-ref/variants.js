// Regenerates testdata/tokenize/golden/variants.jsonl: for each variant of
// testdata/tokenize/variants.json (a base tokenizer.json with parts replaced
// and added tokens appended) the HF Rust core's ids of every text, with and
// without special tokens. Run through generate.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { Tokenizer } = require(path.join(process.env.TOKENIZER_REF_CACHE, 'node_modules', 'tokenizers'));

// applyVariant mirrors applyVariant in internal/tokenize/variants_test.go.
function applyVariant(base, v) {
  const t = JSON.parse(JSON.stringify(base));
  if (v.trim_vocab) {
    const vocab = {};
    for (const [tok, id] of Object.entries(t.model.vocab)) if (id < v.trim_vocab) vocab[tok] = id;
    const has = (tok) => Object.prototype.hasOwnProperty.call(vocab, tok);
    t.model.vocab = vocab;
    t.model.merges = t.model.merges.filter((m) => {
      const [a, b] = Array.isArray(m) ? m : m.split(' ');
      return has(a) && has(b) && has(a + b);
    });
  }
  for (const [k, val] of Object.entries(v.set || {})) t[k] = val;
  let next = Object.keys(t.model.vocab).length;
  for (const a of t.added_tokens) next = Math.max(next, a.id + 1);
  for (const a of v.add_tokens || []) {
    // A token the vocab holds keeps the vocab's id, as the library assigns it.
    const id = Object.prototype.hasOwnProperty.call(t.model.vocab, a.content) ? t.model.vocab[a.content] : next++;
    t.added_tokens.push({
      id, content: a.content, single_word: !!a.single_word, lstrip: !!a.lstrip,
      rstrip: !!a.rstrip, normalized: !!a.normalized, special: !!a.special,
    });
  }
  return t;
}

async function main() {
  const dir = path.join(process.env.REPO_ROOT, 'testdata', 'tokenize');
  const spec = JSON.parse(fs.readFileSync(path.join(dir, 'variants.json'), 'utf8'));
  const bases = {};
  const lines = [];
  for (const v of spec.variants) {
    if (!bases[v.base]) {
      bases[v.base] = JSON.parse(zlib.gunzipSync(fs.readFileSync(path.join(dir, `${v.base}.tokenizer.json.gz`))).toString('utf8'));
    }
    const tok = Tokenizer.fromString(JSON.stringify(applyVariant(bases[v.base], v)));
    for (const text of spec.texts) {
      const plain = await tok.encode(text, null, { addSpecialTokens: false });
      const special = await tok.encode(text, null, { addSpecialTokens: true });
      lines.push(JSON.stringify({ variant: v.name, text, ids: plain.getIds(), ids_special: special.getIds() }));
    }
    console.error(`variant ${v.name}`);
  }
  fs.writeFileSync(path.join(dir, 'golden', 'variants.jsonl'), lines.join('\n') + '\n');
}
main().catch((e) => { console.error(e); process.exit(1); });
