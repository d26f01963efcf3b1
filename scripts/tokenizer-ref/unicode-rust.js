// Writes testdata/tokenize/hf-unicode.json: what the HF Rust core's own
// character tables (Rust's std, newer than Go's, and the older tables of the
// crates its normalizers and pre-tokenizers use) make of every code point,
// for the components that read them. Measured by encoding every code point,
// one a line, through a probe (byteprobe.js):
//   lowercase:     [cp, result] for each code point the Lowercase normalizer changes
//   nmt:           [cp, result] for each code point the Nmt normalizer changes
//   strip_accents: ranges the StripAccents normalizer removes
//   punctuation:   ranges the Punctuation pre-tokenizer splits off
//   word, space:   ranges of \w and \s in the core's regex engine (the
//                  Whitespace pre-tokenizer's \w+|[^\w\s]+)
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

async function main() {
  const split = (re) => [{ type: 'Split', pattern: { Regex: re }, behavior: 'Removed', invert: false }];
  const res = {
    lowercase: await changed({ type: 'Lowercase' }),
    nmt: await changed({ type: 'Nmt' }, 'Q'),
    strip_accents: await removed({ type: 'StripAccents' }, []),
    punctuation: await removed(null, [{ type: 'Punctuation', behavior: 'Removed' }]),
    word: await removed(null, split('\\w')),
    space: await removed(null, split('\\s'), 'Q'),
  };
  fs.writeFileSync(path.join(process.env.REPO_ROOT, 'testdata', 'tokenize', 'hf-unicode.json'), JSON.stringify(res) + '\n');
  for (const [k, v] of Object.entries(res)) console.error(`${k}: ${v.length}`);
}
main().catch((e) => { console.error(e); process.exit(1); });
