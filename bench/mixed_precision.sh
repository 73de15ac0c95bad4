#!/usr/bin/env bash
# bf16 mixed precision against fp32 on this machine, in one run: the small model
# (configs/small.json) on the KJV text, --batch 4 --micro-batch 2 at --seq SEQ, under keep and memo
# (alpha 0.5) with the static plan (--device-memory 8GiB), in fp32 and with --precision bf16
# (bf16 weights and activations stored, computed in f32 by conversion on the CPU: Note [bf16
# storage by conversion]). Per run, from the JSON logs (steps after the first): tokens/s (median)
# and its ratio to fp32 keep's, the planned activation arena (reserved_bytes) and its ratio to the
# same strategy's fp32 arena, the host pool's peak, and the first step's loss and its relative
# distance from fp32's (the derived bound: 2^-9; Note [Mixed precision] in model/model.h).
# Usage: bench/mixed_precision.sh [SEQ] [STEPS]   (default: 1024 6)
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-1024}
steps=${2:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, $(date -u +%F)"
echo "small model, --seq $seq --batch 4 --micro-batch 2, $steps steps; tokens/s: median over steps 2..$steps"
run() {  # name precision activations [extra flags]
  local name=$1 precision=$2 activations=$3
  build/memo train --config configs/small.json --data data/kjv.txt --seq "$seq" --batch 4 \
    --micro-batch 2 --steps "$steps" --val-batches 1 --device-memory 8GiB \
    --precision "$precision" --activations "$activations" "${@:4}" --out "$work/$name" \
    --log "$work/$name.jsonl" > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
}
run fp32-keep fp32 keep
run bf16-keep bf16 keep
run fp32-memo fp32 memo --alpha 0.5
run bf16-memo bf16 memo --alpha 0.5
/usr/bin/python3 - "$work" <<'EOF'
import json, statistics, sys
work = sys.argv[1]
def load(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
runs = {n: load(n) for n in ("fp32-keep", "bf16-keep", "fp32-memo", "bf16-memo")}
base_tps = statistics.median(r["tokens_per_s"] for r in runs["fp32-keep"][1:])
print(f"{'run':<10} {'tok/s':>8} {'x fp32 keep':>11} {'arena MiB':>10} {'x fp32':>7} "
      f"{'host MiB':>9} {'step-1 loss':>18} {'rel. to fp32':>12}")
for name, recs in runs.items():
    tps = statistics.median(r["tokens_per_s"] for r in recs[1:])
    twin = runs["fp32-" + name.split("-")[1]]
    arena, twin_arena = recs[-1]["reserved_bytes"], twin[-1]["reserved_bytes"]
    loss, twin_loss = recs[0]["loss"], twin[0]["loss"]
    print(f"{name:<10} {tps:8.0f} {tps / base_tps:11.2f} {arena / 2**20:10.1f} "
          f"{arena / twin_arena:7.3f} {recs[-1]['host_peak_bytes'] / 2**20:9.1f} {loss:18.15f} "
          f"{abs(loss - twin_loss) / twin_loss:12.2e}")
same = [r["loss"] for r in runs["bf16-keep"]] == [r["loss"] for r in runs["bf16-memo"]]
print(f"bf16 keep and memo losses bit for bit equal over {len(runs['bf16-keep'])} steps: {same}")
EOF
