// Test helper of tests/data/tokenizer_npm_test.cc (run by node).
// Writes a Hugging Face tokenizer.json for tiktoken's cl100k_base (the npm tiktoken package's
// ranks), as transformers' TikTokenConverter does: vocabulary = the ranks spelled in GPT-2's
// byte-level alphabet; merges = every split of every token into two tokens, in the merged
// token's rank order; ignore_merges (a piece that is one token is that token, as tiktoken does).
// Then encodes the chunks of TEXT (byte lengths in LENS) with tiktoken itself, ids of chunk i
// ending with -1, into IDS.
const [tiktokenDir, outJson, textPath, lensPath, idsPath] = process.argv.slice(2);
const fs = require('fs');
const path = require('path');
const spec = JSON.parse(fs.readFileSync(path.join(tiktokenDir, 'encoders', 'cl100k_base.json'), 'utf8'));
const ranks = new Map();  // token bytes as a latin1 string -> rank
for (const line of spec.bpe_ranks.split('\n')) {
  if (!line) continue;
  const [, offset, ...tokens] = line.split(' ');
  tokens.forEach((t, i) => ranks.set(Buffer.from(t, 'base64').toString('latin1'), parseInt(offset) + i));
}
const bs = [];
for (let b = 33; b <= 126; ++b) bs.push(b);
for (let b = 161; b <= 172; ++b) bs.push(b);
for (let b = 174; b <= 255; ++b) bs.push(b);
const cs = bs.slice();
let extra = 0;
for (let b = 0; b < 256; ++b) if (!bs.includes(b)) { bs.push(b); cs.push(256 + extra++); }
const alphabet = new Array(256);
bs.forEach((b, i) => { alphabet[b] = String.fromCodePoint(cs[i]); });
const spell = (s) => { let out = ''; for (let i = 0; i < s.length; ++i) out += alphabet[s.charCodeAt(i)]; return out; };
const vocab = {};
const merges = [];
const byRank = [...ranks.entries()].sort((a, b) => a[1] - b[1]);
for (const [token, rank] of byRank) {
  vocab[spell(token)] = rank;
  const local = [];
  for (let i = 1; i < token.length; ++i) {
    const l = token.slice(0, i), r = token.slice(i);
    if (ranks.has(l) && ranks.has(r)) local.push([ranks.get(l), ranks.get(r), l, r]);
  }
  local.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  for (const m of local) merges.push([spell(m[2]), spell(m[3])]);
}
const added = Object.entries(spec.special_tokens).map(([content, id]) => ({ id, content, special: true }));
fs.writeFileSync(outJson, JSON.stringify({
  version: '1.0', added_tokens: added, normalizer: null,
  pre_tokenizer: { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: spec.pat_str }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
  decoder: { type: 'ByteLevel' },
  model: { type: 'BPE', ignore_merges: true, vocab, merges } }));
const { get_encoding } = require(tiktokenDir);
const enc = get_encoding('cl100k_base');
const text = fs.readFileSync(textPath);
const lens = JSON.parse(fs.readFileSync(lensPath, 'utf8'));
const dec = new TextDecoder('utf-8', { fatal: true });
const out = [];
let off = 0;
for (const n of lens) {
  for (const id of enc.encode_ordinary(dec.decode(text.subarray(off, off + n)))) out.push(id);
  off += n;
  out.push(-1);
}
enc.free();
fs.writeFileSync(idsPath, Buffer.from(new Int32Array(out).buffer));
console.log(`${ranks.size} tokens, ${merges.length} merges`);
