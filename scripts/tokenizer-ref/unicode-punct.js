// Writes testdata/tokenize/hf-punctuation.json: the code points the HF Rust
// core's Punctuation pre-tokenizer splits off (ASCII punctuation and the
// general category P of its own, older, Unicode tables), measured with the
// Removed behaviour: a line that comes back empty held one. Run through
// generate.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const { probe, ranges, allCodePoints, perLine } = require('./byteprobe.js');

async function main() {
  const cps = allCodePoints();
  const left = await perLine(probe(null, [{ type: 'Punctuation', behavior: 'Removed' }]), cps);
  const punct = cps.filter((c, i) => left[i] === '');
  fs.writeFileSync(path.join(process.env.REPO_ROOT, 'testdata', 'tokenize', 'hf-punctuation.json'), JSON.stringify({ punctuation: ranges(punct) }) + '\n');
  console.error(`${punct.length} code points the core's Punctuation splits off`);
}
main().catch((e) => { console.error(e); process.exit(1); });
