// The reference tokenizers on the same text as bench/tokenizer_bench.cc: tiktoken (npm package
// `tiktoken`: OpenAI's Rust core compiled to WebAssembly) and gpt-3-encoder (GPT-2's bpe() in
// JavaScript), both with GPT-2's vocabulary, one thread, CPU time (process.cpuUsage, user +
// system). Prints MB/s and the ids' FNV-1a checksum (equal to memo's when the ids are equal).
// Usage: node tokenizer_reference.js NODE_MODULES_DIR FILE... [--reps N] [--encoding cl100k_base]
// (with --encoding other than gpt2, only tiktoken runs)
const path = require('path');
const fs = require('fs');
const args = process.argv.slice(2);
const modules = args[0];
let reps = 3;
let encoding = 'gpt2';
const files = [];
for (let i = 1; i < args.length; ++i) {
  if (args[i] === '--reps') reps = parseInt(args[++i]);
  else if (args[i] === '--encoding') encoding = args[++i];
  else files.push(args[i]);
}
const buf = Buffer.concat(files.map((f) => fs.readFileSync(f)));
const text = new TextDecoder('utf-8', { fatal: true }).decode(buf);
const mb = buf.length / 1e6;

function fnv(ids) {
  let h = 1469598103934665603n;
  const prime = 1099511628211n, mask = (1n << 64n) - 1n;
  for (const id of ids) h = ((h ^ BigInt(id >>> 0)) * prime) & mask;
  return h.toString(16).padStart(16, '0');
}

function time(name, encode) {
  let best = Infinity, ids;
  for (let r = 0; r < reps; ++r) {
    const c0 = process.cpuUsage();
    ids = encode(text);
    const c = process.cpuUsage(c0);
    best = Math.min(best, (c.user + c.system) / 1e6);
  }
  console.log(`${name}: ${(mb / best).toFixed(2)} MB/s per CPU second (${best.toFixed(3)} s CPU), ` +
              `${ids.length} tokens, ids FNV-1a ${fnv(ids)}, best of ${reps}`);
}

const { get_encoding } = require(path.join(modules, 'tiktoken'));
const enc = get_encoding(encoding);
time(`tiktoken (WebAssembly) ${encoding}`, (t) => enc.encode_ordinary(t));
enc.free();
if (encoding !== 'gpt2') process.exit(0);
// gpt-3-encoder concatenates arrays per piece (quadratic in a long text): feed it lines.
const gpt3 = require(path.join(modules, 'gpt-3-encoder'));
time('gpt-3-encoder', (t) => {
  const out = [];
  let at = 0;
  while (at < t.length) {
    let end = t.indexOf('\n', at + 4000);
    end = end < 0 ? t.length : end + 1;
    for (const id of gpt3.encode(t.slice(at, end))) out.push(id);
    at = end;
  }
  return out;
});
