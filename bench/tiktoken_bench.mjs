// js-tiktoken (pure JavaScript, GPT-2 ranks) on the same text as build/tokenize_bench: the median
// MB/s of encode() over RUNS runs after one warm-up run. Prints one JSON line with the same
// "tokens" and "checksum" (h = h * 31 + id, mod 2^32) as tokenize_bench.
//   node bench/tiktoken_bench.mjs NPM_DIR TEXT_FILE [RUNS]
// NPM_DIR holds node_modules/js-tiktoken (bench/tokenizer_bench.sh installs it under /tmp).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const [npmDir, file, runsArg] = process.argv.slice(2);
const runs = Number(runsArg || 5);
const require = createRequire(join(npmDir, 'node_modules', '_.js'));
const { Tiktoken } = require('js-tiktoken/lite');
const gpt2 = require('js-tiktoken/ranks/gpt2');
const enc = new Tiktoken(gpt2.default ?? gpt2);
const text = readFileSync(file, 'utf8');
const bytes = Buffer.byteLength(text);

// special tokens are ordinary text here, as in memwall and gpt-3-encoder
let ids = enc.encode(text, [], []);
const mbs = [];
for (let r = 0; r < runs; r++) {
  const t0 = process.hrtime.bigint();
  ids = enc.encode(text, [], []);
  mbs.push(bytes / (Number(process.hrtime.bigint() - t0) / 1e9) / 1e6);
}
mbs.sort((a, b) => a - b);
const med = runs % 2 ? mbs[(runs - 1) / 2] : (mbs[runs / 2 - 1] + mbs[runs / 2]) / 2;
let sum = 0;
for (const id of ids) sum = (Math.imul(sum, 31) + id) >>> 0;
console.log(JSON.stringify({ bytes, tokens: ids.length, checksum: sum, runs, mbs: Number(med.toFixed(2)) }));
