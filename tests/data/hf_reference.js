// Test helper of tests/data/tokenizer_hf_npm_test.cc (run by node): encodes the chunks of TEXT
// (byte lengths in LENS) with transformers.js's tokenizers (npm @lenml/tokenizers) loaded from
// MODELS/tokenizer.json + tokenizer_config.json. Writes to IDS, as int32: for each chunk its ids
// without special tokens then -1; then for each chunk of PROMPTS (a JSON list of strings) its ids
// with special tokens (BOS/EOS of the template) then -1. Prints the encoding's wall and CPU
// time in ms and the token count.
const [libDir, modelsDir, textPath, lensPath, promptsPath, idsPath] = process.argv.slice(2);
const fs = require('fs');
const path = require('path');
const { TokenizerLoader } = require(libDir);
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(modelsDir, 'tokenizer.json'), 'utf8')),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(modelsDir, 'tokenizer_config.json'), 'utf8')),
});
const text = fs.readFileSync(textPath);
const lens = JSON.parse(fs.readFileSync(lensPath, 'utf8'));
const prompts = JSON.parse(fs.readFileSync(promptsPath, 'utf8'));
const dec = new TextDecoder('utf-8', { fatal: true });
const chunks = [];
let off = 0;
for (const n of lens) {
  chunks.push(dec.decode(text.subarray(off, off + n)));
  off += n;
}
const out = [];
const t0 = process.hrtime.bigint();
const cpu0 = process.cpuUsage();
for (const c of chunks) {
  for (const id of tokenizer.encode(c, { add_special_tokens: false })) out.push(id);
  out.push(-1);
}
const ms = Number(process.hrtime.bigint() - t0) / 1e6;
const cpu = process.cpuUsage(cpu0);
const tokens = out.length - chunks.length;
for (const p of prompts) {
  for (const id of tokenizer.encode(p)) out.push(id);
  out.push(-1);
}
fs.writeFileSync(idsPath, Buffer.from(new Int32Array(out).buffer));
console.log(`encode_ms ${ms.toFixed(1)} cpu_ms ${((cpu.user + cpu.system) / 1e3).toFixed(1)} ` +
            `tokens ${tokens}`);
