// Writes testdata/tokenize/hf-scripts.json: the script classes the HF Rust
// core's UnicodeScripts pre-tokenizer gives every code point, measured
// through the pre-tokenizer itself (a WordLevel model with one unknown token
// gives one token a piece, whose offsets, in code points, are the pieces).
// The pre-tokenizer starts a piece at a character whose script differs from
// that of the last character before it that is not of the "Any" class; an
// Any character (the space, and what its table leaves unassigned) starts
// none and is skipped when comparing.
//   classes: a representative code point of each class but Any, numbered
//            from 1 in the order met
//   ranges:  [first, last, class] over every scalar value, 0 for Any (the
//            code points c for which neither "a" + c nor "," + c, Latin
//            then Common, starts a piece at c)
// internal/tokenize/gen_classes.go turns it into Go tables. It also writes
// testdata/tokenize/golden/unicode_scripts.jsonl: the pieces (start and end,
// in code points) the pre-tokenizer makes of each corpus text. Run through
// generate.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const { allCodePoints } = require('./byteprobe.js');
const { Tokenizer } = require(path.join(process.env.TOKENIZER_REF_CACHE, 'node_modules', 'tokenizers'));

const tok = Tokenizer.fromString(JSON.stringify({
  version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
  pre_tokenizer: { type: 'UnicodeScripts' }, post_processor: null, decoder: null,
  model: { type: 'WordLevel', vocab: { '[UNK]': 0 }, unk_token: '[UNK]' },
}));

// starts returns the set of code-point indices where the pieces of cps start.
async function starts(cps) {
  const enc = await tok.encode(String.fromCodePoint(...cps), null, { addSpecialTokens: false });
  return new Set(enc.getOffsets().map((o) => o[0]));
}

// splitAfter reports, for each code point c, whether prev + c starts a piece
// at c, measured in texts of prev c1 prev c2 ...
async function splitAfter(prev, cps) {
  const out = [];
  const step = 1 << 14;
  for (let i = 0; i < cps.length; i += step) {
    const part = cps.slice(i, i + step);
    const text = [];
    for (const c of part) text.push(prev, c);
    const s = await starts(text);
    part.forEach((_, k) => out.push(s.has(2 * k + 1)));
  }
  return out;
}

(async () => {
  const cps = allCodePoints('\0').concat([0]).sort((a, b) => a - b);
  const afterLatin = await splitAfter(0x61, cps);
  const afterCommon = await splitAfter(0x2c, cps);
  const isAny = new Map();
  cps.forEach((c, i) => isAny.set(c, !afterLatin[i] && !afterCommon[i]));
  if (!isAny.get(0x20) || isAny.get(0x61) || isAny.get(0x2c)) throw new Error('unexpected Any class');

  // Runs of one script among the other code points, in order: a piece
  // starts wherever the script changes.
  const rest = cps.filter((c) => !isAny.get(c));
  const runStart = new Array(rest.length).fill(false);
  runStart[0] = true;
  const step = 1 << 14;
  for (let i = 0; i < rest.length; i += step) {
    const from = Math.max(0, i - 1); // one character of overlap
    const part = rest.slice(from, i + step);
    const s = await starts(part);
    for (let k = 1; k < part.length; k++) if (s.has(k)) runStart[from + k] = true;
  }

  // Name each run's class: the first representative rep with rep + c
  // starting no piece at c.
  const reps = [];
  const classOf = new Map();
  let cur = 0;
  for (let i = 0; i < rest.length; i++) {
    const c = rest[i];
    if (runStart[i]) {
      cur = 0;
      if (reps.length) {
        const text = [];
        for (const r of reps) text.push(r, c);
        const s = await starts(text);
        const k = reps.findIndex((_, j) => !s.has(2 * j + 1));
        if (k >= 0) cur = k + 1;
      }
      if (cur === 0) {
        reps.push(c);
        cur = reps.length;
      }
    }
    classOf.set(c, cur);
  }

  const table = [];
  for (const c of cps) {
    const cls = isAny.get(c) ? 0 : classOf.get(c);
    const last = table[table.length - 1];
    if (last && last[2] === cls && last[1] === c - 1) last[1] = c;
    else table.push([c, c, cls]);
  }
  const out = { classes: reps, ranges: table };
  const file = path.join(process.env.REPO_ROOT, 'testdata', 'tokenize', 'hf-scripts.json');
  fs.writeFileSync(file, JSON.stringify(out) + '\n');
  console.error(`${file}: ${reps.length} classes, ${table.length} ranges`);

  const dir = path.join(process.env.REPO_ROOT, 'testdata', 'tokenize');
  const corpus = fs.readFileSync(path.join(dir, 'corpus.jsonl'), 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l));
  const lines = [];
  for (const c of corpus) {
    const enc = await tok.encode(c.text, null, { addSpecialTokens: false });
    lines.push(JSON.stringify({ name: c.name, pieces: enc.getOffsets() }));
  }
  fs.writeFileSync(path.join(dir, 'golden', 'unicode_scripts.jsonl'), lines.join('\n') + '\n');
})().catch((e) => { console.error(e); process.exit(1); });
