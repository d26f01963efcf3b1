// Writes testdata/tokenize/hf-graphemes.json: how the HF Rust core's
// grapheme clusters (the unicode-segmentation crate, Unicode 17) join
// characters, measured through its Precompiled normalizer, which replaces a
// cluster under 6 bytes whole by the replacement of its first character
// (so a character the cluster swallowed is gone) and a longer one a
// character at a time. K is क, V its virama, Q क़ (NFKC maps it), M U+0301.
//   joins:     c for which "A" + c is one cluster (a one-key charsmap "A" -> "a":
//              "a" means c went with the A): the marks, spacing marks, joiners
//   prepend:   c for which c + "A" + M keeps M with the one-key charsmap:
//              c joins what follows it (GB9b), so M is not in a cluster "A" + M
//   linker:    c for which K + c + Q + M keeps M: c links a conjunct, so Q
//              and M are in a cluster of 6 bytes or more (GB9c; also true of
//              characters that join what follows them, prepended signs)
//   extend:    c for which K + V + c + Q + M keeps M: c may stand between a
//              linker and the next consonant
//   consonant: c of 2 or 3 bytes for which K + V + c + M keeps M with a
//              one-key charsmap c -> "z": c continues the conjunct (also
//              true of marks, and of controls, which break on both sides)
// Candidates only: internal/tokenize filters them with its own cluster
// rules (the marks uniseg knows, the controls it breaks at) and tests its
// tables against the result. The probe texts and the core's results, for
// the candidates and the real charsmap, are in "probes". Run through
// generate.sh, after spm-train.py.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { precompiled } = require(path.join(process.env.TOKENIZER_REF_CACHE, 'node_modules', 'tokenizers'));
const { ranges } = require('./byteprobe.js');

const dir = path.join(process.env.REPO_ROOT, 'testdata', 'tokenize');
const K = '\u0915';
const V = '\u094d';
const Q = '\u0958';
const M = '\u0301';

// oneKey is a Precompiled normalizer whose charsmap maps the one character c
// (its UTF-8 bytes, at most 3) to to: a darts-clone double array of 1024
// units with the root's children at 256.., the next levels at 512.. and
// 768.., and each leaf beside its parent.
function oneKey(c, to) {
  const b = Buffer.from(String.fromCodePoint(c));
  if (b.length > 3) throw new Error('oneKey takes at most 3 bytes');
  const t = new Uint32Array(1024);
  t[0] = 256 << 10;
  let pos = 256 ^ b[0];
  const levels = [512, 768];
  for (let k = 0; k < b.length; k++) {
    if (k === b.length - 1) {
      t[pos] = (1 << 10) | (1 << 8) | b[k];
      t[pos ^ 1] = 0x80000000;
    } else {
      t[pos] = ((pos ^ levels[k]) << 10) | b[k];
      pos = levels[k] ^ b[k + 1];
    }
  }
  const strs = Buffer.from(to + '\0');
  const out = Buffer.alloc(4 + 4 * t.length + strs.length);
  out.writeUInt32LE(4 * t.length, 0);
  t.forEach((u, i) => out.writeUInt32LE(u >>> 0, 4 + 4 * i));
  strs.copy(out, 4 + 4 * t.length);
  return precompiled([...out]);
}

function main() {
  const raw = zlib.gunzipSync(fs.readFileSync(path.join(dir, 'spm_unigram.tokenizer.json.gz'))).toString('utf8');
  const real = precompiled([...Buffer.from(JSON.parse(raw).normalizer.normalizers[0].precompiled_charsmap, 'base64')]);
  const a = oneKey(0x41, 'a');
  const joins = [];
  const prepend = [];
  const linker = [];
  const extend = [];
  const consonant = [];
  const probes = [];
  for (let c = 0; c < 0x110000; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    const s = String.fromCodePoint(c);
    if (a.normalizeString('A' + s) === 'a') joins.push(c);
    if (a.normalizeString(s + 'A' + M).endsWith(M)) {
      prepend.push(c);
      probes.push([s + Q + M, real.normalizeString(s + Q + M)]);
    }
    const l = K + s + Q + M;
    const lr = real.normalizeString(l);
    if (lr.endsWith(M)) {
      linker.push(c);
      probes.push([l, lr]);
    }
    const e = K + V + s + Q + M;
    const er = real.normalizeString(e);
    if (er.endsWith(M)) {
      extend.push(c);
      probes.push([e, er]);
    }
    if (c >= 0x80 && c <= 0xffff) {
      const z = oneKey(c, 'z');
      if (z.normalizeString(K + V + s + M).endsWith(M)) {
        consonant.push(c);
        const p = K + V + s + M;
        probes.push([p, real.normalizeString(p)]);
      }
    }
  }
  // U+11A3A was a prepended sign before Unicode 15.1 (and still is to
  // uniseg); the library's clusters end after it.
  for (const c of [0x11a3a]) {
    const p = String.fromCodePoint(c) + Q + M;
    probes.push([p, real.normalizeString(p)]);
  }
  const out = { joins: ranges(joins), prepend: ranges(prepend), linker: ranges(linker), extend: ranges(extend), consonant: ranges(consonant) };
  const body = ['{'];
  for (const [k, v] of Object.entries(out)) body.push(`"${k}": ${JSON.stringify(v)},`);
  body.push('"probes": [', probes.map((p) => JSON.stringify(p)).join(',\n'), ']', '}');
  fs.writeFileSync(path.join(dir, 'hf-graphemes.json'), body.join('\n') + '\n');
  console.error(`hf-graphemes: ${joins.length} join, ${prepend.length} prepend, ${linker.length} link, ${extend.length} extend, ` +
    `${consonant.length} consonant candidates, ${probes.length} probes`);
}
main();
