#!/usr/bin/env bash
# The surge-law reproduction on the KJV text (DESIGN.md section 3, shared/papers/surge-notes.md
# section 3.5): lr x batch sweeps of a tiny LLaMA (bench/surge_tiny.json: 2 layers, hidden 64,
# byte vocabulary) for Adam with betas (0, 0) (sign descent), Adam (0.9, 0.999) and SGD, each run
# from scratch on the same token budget with a constant lr, then `memo fit` on each and one plot.
# Batch sizes are tokens per step; B_simple comes from 2-sequence (64-token) micro-batches in
# every run with at least 2 of them. One thread: the 2-core machine is shared.
#
#   bible gen1:1-rev22:21 > data/kjv.txt      # once (data/ is gitignored)
#   bench/surge_sweep.sh [build/memo] [out_dir]
# Interrupted? Run it again: finished runs are skipped.
set -euo pipefail
MEMO=${1:-build/memo}
OUT=${2:-runs/surge}
DATA=${DATA:-data/kjv.txt}
TOKENS=${TOKENS:-65536}         # tokens per run: 32 steps at the largest batch, 1024 at the smallest
BATCHES=${BATCHES:-64,128,256,512,1024,2048}      # tokens per step: 32x
COMMON="--config bench/surge_tiny.json --data $DATA --seq 32 --micro-batch 2 --tokens $TOKENS \
  --warmup 0 --min-lr-ratio 1 --clip 0 --val-windows 128 --seed 1"
mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
"$MEMO" sweep $COMMON --optimizer adam --beta1 0 --beta2 0 --batches "$BATCHES" \
  --lrs ${LRS_SIGN:-1.25e-4,2.5e-4,5e-4,1e-3,2e-3,4e-3,8e-3} --out "$OUT/adam_sign.jsonl"
"$MEMO" sweep $COMMON --optimizer adam --beta1 0.9 --beta2 0.999 --batches "$BATCHES" \
  --lrs ${LRS_ADAM:-2.5e-4,5e-4,1e-3,2e-3,4e-3,8e-3,1.6e-2} --out "$OUT/adam.jsonl"
"$MEMO" sweep $COMMON --optimizer sgd --batches "$BATCHES" \
  --lrs ${LRS_SGD:-0.0375,0.075,0.15,0.3,0.6,1.2} --out "$OUT/sgd.jsonl"
for f in adam_sign adam sgd; do "$MEMO" fit "$OUT/$f.jsonl" --json > "$OUT/$f.fit.json"; done
"$MEMO" fit "$OUT/adam_sign.jsonl" "$OUT/adam.jsonl" "$OUT/sgd.jsonl" --plot bench/surge_sweep.svg
# the same runs judged earlier in training (the smoothed training loss at a quarter of the budget)
"$MEMO" fit "$OUT/adam_sign.jsonl" "$OUT/adam.jsonl" "$OUT/sgd.jsonl" --at-tokens $((TOKENS / 4)) \
  --plot bench/surge_sweep_quarter.svg
# The paper's protocol (Section 3.2) for sign-Adam: train to a smoothed training loss of 2.5
# (20-step window mean), then 50 more steps; per batch the lr with the largest loss reduction;
# B_noise from 1/S vs 1/E (Eq. 22), eps_max from Eq. 23. The token budget is only a cap here.
"$MEMO" sweep --config bench/surge_tiny.json --data $DATA --seq 32 --micro-batch 2 --tokens 262144 \
  --warmup 0 --min-lr-ratio 1 --clip 0 --val-windows 0 --seed 1 --optimizer adam --beta1 0 --beta2 0 \
  --batches "$BATCHES" --lrs ${LRS_TARGET:-5e-4,1e-3,2e-3,4e-3,8e-3} --target-loss 2.5 --extra-steps 50 \
  --loss-window 20 --out "$OUT/adam_sign_target.jsonl"
"$MEMO" fit "$OUT/adam_sign_target.jsonl"
"$MEMO" fit "$OUT/adam_sign_target.jsonl" --json > "$OUT/adam_sign_target.fit.json"
# A lower loss level: both Adam settings again with 4x the token budget (128 steps at the largest
# batch), to see whether the optimum moves to larger batches as the loss falls.
for cfg in "adam_sign_long --beta1 0 --beta2 0" "adam_long --beta1 0.9 --beta2 0.999"; do
  set -- $cfg
  name=$1; shift
  "$MEMO" sweep $COMMON --tokens $((TOKENS * 4)) --optimizer adam "$@" --batches "$BATCHES" \
    --lrs ${LRS_LONG:-2.5e-4,5e-4,1e-3,2e-3,4e-3,8e-3} --out "$OUT/$name.jsonl"
  "$MEMO" fit "$OUT/$name.jsonl" --json > "$OUT/$name.fit.json"
done
"$MEMO" fit "$OUT/adam_sign.jsonl" "$OUT/adam_sign_long.jsonl" "$OUT/adam.jsonl" "$OUT/adam_long.jsonl" \
  --plot bench/surge_sweep_long.svg
