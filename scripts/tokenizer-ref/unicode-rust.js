// Writes testdata/tokenize/hf-unicode.json: what the HF Rust core's own
// character tables (Rust's std, newer than Go's, and the older tables of the
// crates its normalizers and pre-tokenizers use) make of every code point,
// for the components that read them. Measured by encoding every code point,
// one a line, through a probe (byteprobe.js):
//   lowercase:     [cp, result] for each code point the Lowercase normalizer changes
//   nmt:           [cp, result] for each code point the Nmt normalizer changes
//   strip_accents: ranges the StripAccents normalizer removes
//   punctuation:   ranges the Punctuation pre-tokenizer splits off
//   numeric:       ranges the Digits pre-tokenizer takes for digits
//   word, space:   ranges of \w and \s in the Whitespace pre-tokenizer's
//                  \w+|[^\w\s]+ (the regex crate's classes)
//   bert_control:  ranges BertNormalizer's clean_text removes (NUL, U+FFFD and
//                  its "other" category, from an older Unicode)
//   bert_space:    ranges clean_text turns into a space (Rust's whitespace)
//   bert_mn:       ranges BertNormalizer's strip_accents removes after NFD
//                  (non-spacing marks, from an older Unicode)
// internal/tokenize/gen_classes.go turns it into Go tables. Run through
// generate.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const { probe, ranges, allCodePoints, perLine } = require('./byteprobe.js');

// changed lists what the normalizer changes; sep must be a character it
// leaves alone (Nmt turns "\n" into a space).
async function changed(normalizer, sep = '\n') {
  const cps = allCodePoints(sep);
  const out = await perLine(probe(normalizer, []), cps, sep);
  const res = [];
  cps.forEach((c, i) => {
    if (out[i] !== String.fromCodePoint(c)) res.push([c, out[i]]);
  });
  return res;
}

// removed lists what the normalizer or pre-tokenizer stages remove; sep as
// for changed.
async function removed(normalizer, preStages, sep = '\n') {
  const cps = allCodePoints(sep);
  const out = await perLine(probe(normalizer, preStages), cps, sep);
  return ranges(cps.filter((c, i) => out[i] === ''));
}

// whitespaceClasses measures the Whitespace pre-tokenizer's \w and \s (its
// regex is the regex crate's, not the Split pre-tokenizer's engine): "a"
// and each code point, the pairs apart by spaces, then Metaspace marks where
// each piece starts. "▁a" + c: c continues the word; "▁a▁" + c: c starts a
// piece of its own; "▁a" alone: c was removed as whitespace. U+2581 itself
// (a symbol, in neither class) would blur the marks and is left out.
async function whitespaceClasses() {
  const cps = allCodePoints(' ').filter((c) => c !== 0x2581);
  const hf = probe(null, [{ type: 'Whitespace' },
    { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: false }]);
  const word = [];
  const space = [];
  const step = 1 << 14;
  for (let i = 0; i < cps.length; i += step) {
    const part = cps.slice(i, i + step);
    const out = await hf(part.map((c) => 'a' + String.fromCodePoint(c)).join(' '));
    let k = 0;
    for (const c of part) {
      const ch = String.fromCodePoint(c);
      if (!out.startsWith('\u2581a', k)) throw new Error(`probe lost its place at U+${c.toString(16)}`);
      k += 2;
      if (out.startsWith(ch, k) && !out.startsWith('\u2581a', k)) {
        word.push(c);
        k += ch.length;
      } else if (out.startsWith('\u2581' + ch, k)) {
        k += 1 + ch.length;
      } else {
        space.push(c);
      }
    }
    if (k !== out.length) throw new Error('probe left text over');
  }
  space.push(0x20);
  space.sort((a, b) => a - b);
  return { word: ranges(word), space: ranges(space) };
}

// numericClass measures the Digits pre-tokenizer's digits (Rust's
// char::is_numeric, whose Unicode is newer than the regex engine's \p{N}):
// "a" and each code point, run together, then Metaspace marks where each
// piece starts; a digit is cut out ("▁" + c, the next "a" a new piece).
async function numericClass() {
  const cps = allCodePoints(' ').filter((c) => c !== 0x2581);
  const hf = probe(null, [{ type: 'Digits', individual_digits: true },
    { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: false }]);
  const numeric = [];
  const step = 1 << 14;
  for (let i = 0; i < cps.length; i += step) {
    const part = cps.slice(i, i + step);
    const out = await hf(part.map((c) => 'a' + String.fromCodePoint(c)).join(''));
    let k = 0;
    for (const c of part) {
      const ch = String.fromCodePoint(c);
      if (out.startsWith('\u2581a', k)) k += 2;
      else if (out.startsWith('a', k)) k += 1;
      else throw new Error(`probe lost its place at U+${c.toString(16)}`);
      if (out.startsWith('\u2581' + ch, k)) {
        numeric.push(c);
        k += 1 + ch.length;
      } else if (out.startsWith(ch, k)) {
        k += ch.length;
      } else {
        throw new Error(`probe lost its place at U+${c.toString(16)}`);
      }
    }
    if (k !== out.length) throw new Error('probe left text over');
  }
  return ranges(numeric);
}

// bertClasses measures BertNormalizer's character classes, one stage at a
// time ("Q" separates the probes: no stage touches it).
async function bertClasses() {
  const bert = (o) => ({ type: 'BertNormalizer', clean_text: false, handle_chinese_chars: false,
    strip_accents: false, lowercase: false, ...o });
  const clean = await changed(bert({ clean_text: true }), 'Q');
  const control = [];
  const space = [];
  for (const [c, to] of clean) {
    if (to === '') control.push(c);
    else if (to === ' ') space.push(c);
    else throw new Error(`clean_text made U+${c.toString(16)} into ${JSON.stringify(to)}`);
  }
  return {
    bert_control: ranges(control),
    bert_space: ranges(space),
    bert_mn: await removed(bert({ strip_accents: true }), [], 'Q'),
  };
}

async function main() {
  const res = {
    lowercase: await changed({ type: 'Lowercase' }),
    nmt: await changed({ type: 'Nmt' }, 'Q'),
    strip_accents: await removed({ type: 'StripAccents' }, []),
    punctuation: await removed(null, [{ type: 'Punctuation', behavior: 'Removed' }]),
    numeric: await numericClass(),
    ...(await whitespaceClasses()),
    ...(await bertClasses()),
  };
  fs.writeFileSync(path.join(process.env.REPO_ROOT, 'testdata', 'tokenize', 'hf-unicode.json'), JSON.stringify(res) + '\n');
  for (const [k, v] of Object.entries(res)) console.error(`${k}: ${v.length}`);
}
main().catch((e) => { console.error(e); process.exit(1); });
