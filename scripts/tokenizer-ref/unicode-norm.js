// Writes testdata/tokenize/hf-norm-unknown.json: the code points with a
// canonical combining class or a decomposition (per node's Unicode) that the
// HF Rust core's normalizers treat as having neither (their tables are from
// an older Unicode). Measured: a normalizer-only tokenizer (NFKD) encodes
// each candidate alone and after "a" + U+0345 (class 240); a code point the
// core knows is decomposed or moved before U+0345. Run through generate.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const { probe, ranges } = require('./byteprobe.js');

async function main() {
  const dir = path.join(process.env.REPO_ROOT, 'testdata', 'tokenize');
  const hf = probe({ type: 'NFKD' }, []);
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
  fs.writeFileSync(path.join(dir, 'hf-norm-unknown.json'), JSON.stringify({ unknown: ranges(unknown) }) + '\n');
  console.error(`${candidates.length} candidates, ${unknown.length} unknown to the core's normalizer (${ranges(unknown).length} ranges)`);
}
main().catch((e) => { console.error(e); process.exit(1); });
