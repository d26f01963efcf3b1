// Writes testdata/tokenize/onig-classes.json: for each Unicode class the
// split patterns use (and \\w, \\d, \\s), the code points the HF Rust core's regex engine
// (Oniguruma) puts in it, as [lo, hi] ranges. Measured, not read from a
// table: a byte-level tokenizer without merges whose pre-tokenizer removes
// \p{X} encodes every code point, and what is left is the complement.
// internal/tokenize/gen_classes.go turns the file into Go tables of the
// differences from Go's unicode package. Run through generate.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { Tokenizer } = require(path.join(process.env.TOKENIZER_REF_CACHE, 'node_modules', 'tokenizers'));

// Each class by the name the Go side reads, with the regex measured.
const classes = Object.fromEntries(['L', 'Lu', 'Ll', 'Lt', 'Lm', 'Lo', 'M', 'N', 'Nd', 'P', 'S']
  .map((c) => [c, `\\p{${c}}`]));
Object.assign(classes, { w: '\\w', d: '\\d', s: '\\s' });
// \\w inside a bracket class, where the engine's is narrower (it leaves out
// ², ³, ¹, ¼, ½, ¾); the other classes measure the same inside one.
classes['[w]'] = '[\\w]';

async function main() {
  const dir = path.join(process.env.REPO_ROOT, 'testdata', 'tokenize');
  const base = JSON.parse(zlib.gunzipSync(fs.readFileSync(path.join(dir, 'qwen3.tokenizer.json.gz'))).toString('utf8'));
  const vocab = {};
  for (const [tok, id] of Object.entries(base.model.vocab)) if (id < 256) vocab[tok] = id;
  const idToByte = new Map();
  // The byte-level alphabet: printable bytes stand for themselves, the rest for U+0100 on.
  let n = 0;
  const byteOf = new Map();
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    byteOf.set(printable ? String.fromCodePoint(b) : String.fromCodePoint(256 + n++), b);
  }
  for (const [tok, id] of Object.entries(vocab)) idToByte.set(id, byteOf.get(tok));
  const out = {};
  for (const [cls, re] of Object.entries(classes)) {
    const t = {
      version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Split', pattern: { Regex: re }, behavior: 'Removed', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] },
      post_processor: null, decoder: null,
      model: { type: 'BPE', dropout: null, unk_token: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] },
    };
    const tok = Tokenizer.fromString(JSON.stringify(t));
    const member = new Uint8Array(0x110000);
    for (let lo = 0; lo < 0x110000; lo += 0x10000) {
      const chars = [];
      for (let c = lo; c < lo + 0x10000; c++) {
        if (c >= 0xd800 && c <= 0xdfff) continue;
        chars.push(String.fromCodePoint(c));
      }
      const enc = await tok.encode(chars.join(''), null, { addSpecialTokens: false });
      const left = Buffer.from(enc.getIds().map((id) => idToByte.get(id))).toString('utf8');
      const kept = new Set();
      for (const ch of left) kept.add(ch.codePointAt(0));
      for (let c = lo; c < lo + 0x10000; c++) {
        if (c >= 0xd800 && c <= 0xdfff) continue;
        if (!kept.has(c)) member[c] = 1;
      }
    }
    const ranges = [];
    for (let c = 0; c < 0x110000; c++) {
      if (!member[c]) continue;
      if (ranges.length && ranges[ranges.length - 1][1] === c - 1) ranges[ranges.length - 1][1] = c;
      else ranges.push([c, c]);
    }
    out[cls] = ranges;
    console.error(`${re}: ${ranges.length} ranges`);
  }
  fs.writeFileSync(path.join(dir, 'onig-classes.json'), JSON.stringify(out) + '\n');
}
main().catch((e) => { console.error(e); process.exit(1); });
