// Goldens of the SentencePiece tokenizers spm-train.py wrote
// (testdata/tokenize/spm_*.tokenizer.json.gz), from the HF Rust core:
//   golden/<name>.jsonl    per corpus text, the ids without (ids) and with
//                          (ids_special) special tokens, as generate.js writes
//   precompiled-<name>.json what the Precompiled normalizer alone (the file's
//                          charsmap) makes of text, for each distinct charsmap:
//     source:  the tokenizer file the charsmap is read from
//     corpus:  [name, result] for each corpus text it changes
//     single:  [cp, result] for each code point it changes, alone
//     after:   [prefix, cp, result] for each prefix and code point c for
//              which prefix + c does not come out as single(prefix) +
//              single(c): clusters the library replaces whole. The prefixes
//              are mapped characters short enough that a cluster of one and
//              a mark is shorter than 6 bytes: "²" (NFKC's "2") for marks of
//              up to 3 bytes, "A" (a case-folding charsmap's "a") for any.
//     before:  [suffix, cp, result], the same for c + suffix ("a": a
//              prepended sign joins it)
// Run through generate.sh after spm-train.py.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { writeGolden } = require('./golden.js');
const cache = process.env.TOKENIZER_REF_CACHE;
const repo = process.env.REPO_ROOT;
const { Tokenizer, precompiled } = require(path.join(cache, 'node_modules', 'tokenizers'));

const dir = path.join(repo, 'testdata', 'tokenize');
const prefixes = ['\u00b2', 'A'];
const suffixes = ['a'];

function codePoints() {
  const cps = [];
  for (let c = 0; c < 0x110000; c++) if (c < 0xd800 || c > 0xdfff) cps.push(c);
  return cps;
}

function normalizerGolden(source, charsmap, corpus) {
  const norm = precompiled([...Buffer.from(charsmap, 'base64')]);
  const n = (s) => norm.normalizeString(s);
  const out = { source, corpus: [], single: [], after: [], before: [] };
  for (const c of corpus) {
    const r = n(c.text);
    if (r !== c.text) out.corpus.push([c.name, r]);
  }
  const single = new Map();
  for (const c of codePoints()) {
    const s = String.fromCodePoint(c);
    const r = n(s);
    single.set(c, r);
    if (r !== s) out.single.push([c, r]);
  }
  const alone = (s) => single.get(s.codePointAt(0));
  for (const c of codePoints()) {
    const s = String.fromCodePoint(c);
    for (const p of prefixes) {
      const a = n(p + s);
      if (a !== alone(p) + single.get(c)) out.after.push([p, c, a]);
    }
    for (const x of suffixes) {
      const b = n(s + x);
      if (b !== single.get(c) + alone(x)) out.before.push([x, c, b]);
    }
  }
  return out;
}

async function main() {
  const corpus = fs.readFileSync(path.join(dir, 'corpus.jsonl'), 'utf8')
    .split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
  const files = fs.readdirSync(dir).filter((f) => /^spm_.*\.tokenizer\.json\.gz$/.test(f)).sort();
  const charsmaps = new Map();
  for (const f of files) {
    const name = f.replace(/\.tokenizer\.json\.gz$/, '');
    const raw = zlib.gunzipSync(fs.readFileSync(path.join(dir, f))).toString('utf8');
    const tok = Tokenizer.fromString(raw);
    await writeGolden(tok, name, corpus, dir);
    const cm = JSON.parse(raw).normalizer.normalizers[0].precompiled_charsmap;
    if (!charsmaps.has(cm)) charsmaps.set(cm, name);
  }
  for (const [cm, name] of charsmaps) {
    const g = normalizerGolden(`${name}.tokenizer.json.gz`, cm, corpus);
    const body = ['{', `"source": ${JSON.stringify(g.source)},`];
    for (const k of ['corpus', 'single', 'after', 'before']) {
      body.push(`"${k}": [`, g[k].map((e) => JSON.stringify(e)).join(',\n'), ']' + (k === 'before' ? '' : ','));
    }
    body.push('}');
    fs.writeFileSync(path.join(dir, `precompiled-${name}.json`), body.join('\n') + '\n');
    console.error(`precompiled-${name}: ${g.corpus.length} texts, ${g.single.length} code points changed, ` +
      `${g.after.length} after a prefix, ${g.before.length} before a suffix`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
