// writeGolden writes testdata/tokenize/golden/<name>.jsonl: for each corpus
// text, the ids the tokenizer encodes it to without (ids) and with
// (ids_special) special tokens. Shared by generate.js and spm-golden.js.
'use strict';
const fs = require('fs');
const path = require('path');

async function writeGolden(tok, name, corpus, dir) {
  const lines = [];
  for (const c of corpus) {
    const plain = await tok.encode(c.text, null, { addSpecialTokens: false });
    const special = await tok.encode(c.text, null, { addSpecialTokens: true });
    lines.push(JSON.stringify({ name: c.name, ids: plain.getIds(), ids_special: special.getIds() }));
  }
  fs.writeFileSync(path.join(dir, 'golden', `${name}.jsonl`), lines.join('\n') + '\n');
  console.error(`${name}: ${corpus.length} texts`);
}

module.exports = { writeGolden };
