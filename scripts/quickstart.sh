#!/usr/bin/env bash
# The first command of the README: install, build, fetch the default corpus (the King James Bible
# from Debian's bible-kjv-text), and train the small model on it for a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh memo
mkdir -p data
if [[ ! -s data/kjv.txt ]]; then
  bible gen1:1-rev22:21 > data/kjv.txt.tmp && mv data/kjv.txt.tmp data/kjv.txt
fi
exec build/memo train --config configs/small.json --data data/kjv.txt --seq 256 --batch 8 \
  --steps 200 --lr 2e-3 --warmup 20 --save-every 50 --out runs/kjv-small --overwrite --log runs/kjv-small.jsonl "$@"
