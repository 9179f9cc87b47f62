#!/usr/bin/env node
// Writes tests/ref/gpt2_tokens.json: the GPT-2 token ids that OpenAI's encoder (npm package
// gpt-3-encoder) gives for tests/ref/tokenizer_text.txt, which tests/test_tokenizer.c compares
// with memwall's tokenizer id for id. gpt-3-encoder is installed under a temporary directory
// (MW_NPM_DIR, default /tmp/memwall-gpt3-encoder), never inside the repository.
//   node tests/ref/gpt2_tokens_ref.js
// The JSON holds:
//   all          ids of the whole text
//   docs         ids of each line (the text cut after every "\n"), encoded on its own
//   invalid_hex  bytes that are not valid UTF-8; invalid_ids: the ids of Node's decoding of them
//                (each maximal invalid subpart becomes U+FFFD, as Buffer.toString does)
//   long         long single words: n characters drawn from alphabet by the LCG
//                x = (x * 1103515245 + 12345) mod 2^31 from x = seed, character (x >> 16) % |alphabet|,
//                and their ids (test_tokenizer.c rebuilds the same words)
//   classes      [code point, class] for every distinct code point of the text, by Node's own
//                regexes: 1 \p{L}, 2 \p{N}, 3 \s, 0 other (memwall's table must agree)
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const root = path.resolve(__dirname, '..', '..');
const npmDir = process.env.MW_NPM_DIR || '/tmp/memwall-gpt3-encoder';
const pkgDir = path.join(npmDir, 'node_modules', 'gpt-3-encoder');
if (!fs.existsSync(path.join(pkgDir, 'package.json'))) {
  fs.mkdirSync(npmDir, { recursive: true });
  execFileSync('npm', ['install', '--silent', '--no-audit', '--no-fund', '--prefix', npmDir,
                       'gpt-3-encoder@1.1.4'], { stdio: 'inherit' });
}
const { encode } = require(pkgDir);
const version = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version;

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
];

const classes = [];
const seen = new Set();
for (const ch of text) {
  const cp = ch.codePointAt(0);
  if (seen.has(cp)) continue;
  seen.add(cp);
  classes.push([cp, /\s/u.test(ch) ? 3 : /\p{L}/u.test(ch) ? 1 : /\p{N}/u.test(ch) ? 2 : 0]);
}
classes.sort((a, b) => a[0] - b[0]);

const ids = (a) => '[' + a.join(',') + ']';
const out = [
  '{',
  `"generator": "tests/ref/gpt2_tokens_ref.js: gpt-3-encoder ${version}, Node ${process.version}, Unicode ${process.versions.unicode}",`,
  `"text_bytes": ${Buffer.byteLength(text)},`,
  `"all": ${ids(encode(text))},`,
  `"docs": [\n${docs.map((d) => ids(encode(d))).join(',\n')}\n],`,
  `"invalid_hex": "${invalid.toString('hex')}",`,
  `"invalid_ids": ${ids(encode(invalid.toString('utf8')))},`,
  `"long": [\n${longWords.map(([seed, n, a]) =>
    `{"seed": ${seed}, "n": ${n}, "alphabet": ${JSON.stringify(a)}, "ids": ${ids(encode(lcgWord(seed, n, a)))}}`).join(',\n')}\n],`,
  `"classes": [${classes.map((c) => ids(c)).join(',')}]`,
  '}',
  '',
].join('\n');
fs.writeFileSync(path.join(root, 'tests/ref/gpt2_tokens.json'), out);
console.log(`tests/ref/gpt2_tokens.json: ${docs.length} docs, ${Buffer.byteLength(text)} bytes, ` +
            `gpt-3-encoder ${version}`);
