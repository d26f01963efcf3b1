// A probe of the HF Rust core's normalizers and pre-tokenizers: a tokenizer
// with the given normalizer and pre-tokenizer stages before a byte-level model
// without merges, so the ids of an encoding spell back the bytes the
// normalizer and pre-tokenizers left (pieces a pre-tokenizer removed are
// gone). Used by the unicode-*.js measurements.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { Tokenizer } = require(path.join(process.env.TOKENIZER_REF_CACHE, 'node_modules', 'tokenizers'));

// probe returns async (text) => the text as the core leaves it.
function probe(normalizer, preStages) {
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
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [...preStages,
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] },
    post_processor: null, decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] },
  }));
  return async (s) => {
    const enc = await tok.encode(s, null, { addSpecialTokens: false });
    return Buffer.from(enc.getIds().map((id) => idToByte.get(id))).toString('utf8');
  };
}

// ranges folds sorted code points into [first, last] ranges.
function ranges(cps) {
  const out = [];
  for (const c of cps) {
    if (out.length && out[out.length - 1][1] === c - 1) out[out.length - 1][1] = c;
    else out.push([c, c]);
  }
  return out;
}

// allCodePoints lists the scalar values other than sep, the probes' separator.
function allCodePoints(sep = '\n') {
  const cps = [];
  for (let c = 0; c < 0x110000; c++) if (!(c >= 0xd800 && c <= 0xdfff) && c !== sep.codePointAt(0)) cps.push(c);
  return cps;
}

// perLine runs hf over the code points, one a line (lines end at sep, which
// the probe must leave alone), in bounded texts, and returns what each line
// became.
async function perLine(hf, cps, sep = '\n') {
  const out = [];
  const step = 1 << 16;
  for (let i = 0; i < cps.length; i += step) {
    const part = cps.slice(i, i + step);
    const lines = (await hf(part.map((c) => String.fromCodePoint(c)).join(sep))).split(sep);
    if (lines.length !== part.length) throw new Error('probe lengths differ');
    out.push(...lines);
  }
  return out;
}

module.exports = { probe, ranges, allCodePoints, perLine };
