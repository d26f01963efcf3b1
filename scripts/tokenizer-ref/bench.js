// Measures the Hugging Face tokenizers Rust core (npm `tokenizers`) encoding
// the corpus with encodeBatch on one thread (run with
// TOKENIZERS_PARALLELISM=false). Usage: node bench.js TOKENIZER_JSON CORPUS_JSONL MIN_SECONDS
// Prints one JSON line: {"bytes": N, "seconds": S, "mb_per_s": X, "tokens": T}.
'use strict';
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require(path.join(process.env.TOKENIZER_REF_CACHE, 'node_modules', 'tokenizers'));

async function main() {
  const [file, corpusFile, minSeconds] = process.argv.slice(2);
  const texts = fs.readFileSync(corpusFile, 'utf8').split('\n').filter((l) => l.length > 0)
    .map((l) => JSON.parse(l).text);
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, 'utf8'), 0);
  const tok = Tokenizer.fromFile(file);
  let tokens = 0;
  for (const e of await tok.encodeBatch(texts, { addSpecialTokens: true })) tokens += e.getIds().length; // warm-up
  let rounds = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (elapsed < Number(minSeconds) || rounds < 3) {
    await tok.encodeBatch(texts, { addSpecialTokens: true });
    rounds++;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  }
  const total = bytes * rounds;
  console.log(JSON.stringify({ bytes: total, seconds: elapsed, mb_per_s: total / elapsed / 1e6, tokens }));
}
main().catch((e) => { console.error(e); process.exit(1); });
