// Writes testdata/tokenize/hf-norm-unknown.json: the code points with a
// canonical combining class or a decomposition (per node's Unicode) that the
// HF Rust core's normalizers treat as having neither (their tables are from
// an older Unicode). Measured: a normalizer-only tokenizer (NFKD) encodes
// each candidate alone and after "a" + U+0345 (class 240); a code point the
// core knows is decomposed or moved before U+0345. Run through generate.sh.
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
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: { type: 'NFKD' },
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    post_processor: null, decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] },
  }));
  const hf = async (s) => {
    const enc = await tok.encode(s, null, { addSpecialTokens: false });
    return Buffer.from(enc.getIds().map((id) => idToByte.get(id))).toString('utf8');
  };
  const candidates = [];
  for (let c = 0x80; c < 0x110000; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    const s = String.fromCodePoint(c);
    if (s.normalize('NFKD') !== s || ('a\u0345' + s).normalize('NFD') !== 'a\u0345' + s) candidates.push(c);
  }
  const alone = (await hf(candidates.map((c) => String.fromCodePoint(c)).join('\n'))).split('\n');
  const after = (await hf(candidates.map((c) => 'a\u0345' + String.fromCodePoint(c)).join('\n'))).split('\n');
  if (alone.length !== candidates.length || after.length !== candidates.length) throw new Error('probe lengths differ');
  const unknown = [];
  candidates.forEach((c, i) => {
    const s = String.fromCodePoint(c);
    if (c === 0x345) return; // the probe's own mark (class 240)
    if (alone[i] === s && after[i] === 'a\u0345' + s) unknown.push(c);
  });
  const ranges = [];
  for (const c of unknown) {
    if (ranges.length && ranges[ranges.length - 1][1] === c - 1) ranges[ranges.length - 1][1] = c;
    else ranges.push([c, c]);
  }
  fs.writeFileSync(path.join(dir, 'hf-norm-unknown.json'), JSON.stringify({ unknown: ranges }) + '\n');
  console.error(`${candidates.length} candidates, ${unknown.length} unknown to the core's normalizer (${ranges.length} ranges)`);
}
main().catch((e) => { console.error(e); process.exit(1); });
