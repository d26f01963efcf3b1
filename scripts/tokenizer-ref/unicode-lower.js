// Writes testdata/tokenize/hf-lowercase.json: every code point the HF Rust
// core's Lowercase normalizer changes, with what it becomes. The normalizer
// follows Rust's char::to_lowercase, whose Unicode is newer than Go's, so
// internal/tokenize/gen_classes.go keeps the mappings Go's tables lack.
// Run through generate.sh.
'use strict';
const fs = require('fs');
const path = require('path');
const { probe, allCodePoints, perLine } = require('./byteprobe.js');

async function main() {
  const cps = allCodePoints();
  const lowered = await perLine(probe({ type: 'Lowercase' }, []), cps);
  const changed = [];
  cps.forEach((c, i) => {
    if (lowered[i] !== String.fromCodePoint(c)) changed.push([c, lowered[i]]);
  });
  fs.writeFileSync(path.join(process.env.REPO_ROOT, 'testdata', 'tokenize', 'hf-lowercase.json'), JSON.stringify({ lowercase: changed }) + '\n');
  console.error(`${changed.length} code points the core's Lowercase changes`);
}
main().catch((e) => { console.error(e); process.exit(1); });
