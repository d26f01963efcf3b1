// Writes testdata/tokenize/hf-lowercase.json: every code point the HF Rust
// core's Lowercase normalizer changes, with what it becomes. The normalizer
// follows Rust's char::to_lowercase, whose Unicode is newer than Go's, so
// internal/tokenize/gen_classes.go keeps the mappings Go's tables lack.
// Measured: a normalizer-only tokenizer (Lowercase, byte-level model without
// merges) encodes every code point, one a line. Run through generate.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { Tokenizer } = require(path.join(process.env.TOKENIZER_REF_CACHE, 'node_modules', 'tokenizers'));

async function main() {
  const dir = path.join(process.env.REPO_ROOT, 'testdata', 'tokenize');
  const base = JSON.parse(zlib.gunzipSync(fs.readFileSync(path.join(dir, 'qwen3.tokenizer.json.gz'))).toString('utf8'));
  const vocab = {};
  for (const [tok, id] of Object.entries(base.model.vocab)) if (id < 256) vocab[tok] = id;
  let n = 0;
  const byteOf = new Map();
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    byteOf.set(printable ? String.fromCodePoint(b) : String.fromCodePoint(256 + n++), b);
  }
  const idToByte = new Map();
  for (const [tok, id] of Object.entries(vocab)) idToByte.set(id, byteOf.get(tok));
  const tok = Tokenizer.fromString(JSON.stringify({
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: { type: 'Lowercase' },
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    post_processor: null, decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] },
  }));
  const cps = [];
  for (let c = 0; c < 0x110000; c++) {
    if ((c >= 0xd800 && c <= 0xdfff) || c === 0x0a) continue;
    cps.push(c);
  }
  const lowered = [];
  const step = 1 << 16; // bounds one probe text
  for (let i = 0; i < cps.length; i += step) {
    const part = cps.slice(i, i + step);
    const enc = await tok.encode(part.map((c) => String.fromCodePoint(c)).join('\n'), null, { addSpecialTokens: false });
    const out = Buffer.from(enc.getIds().map((id) => idToByte.get(id))).toString('utf8').split('\n');
    if (out.length !== part.length) throw new Error('probe lengths differ');
    lowered.push(...out);
  }
  const changed = [];
  cps.forEach((c, i) => {
    if (lowered[i] !== String.fromCodePoint(c)) changed.push([c, lowered[i]]);
  });
  fs.writeFileSync(path.join(dir, 'hf-lowercase.json'), JSON.stringify({ lowercase: changed }) + '\n');
  console.error(`${changed.length} code points the core's Lowercase changes`);
}
main().catch((e) => { console.error(e); process.exit(1); });
