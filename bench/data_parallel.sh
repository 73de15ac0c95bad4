#!/usr/bin/env bash
# Data, context and tensor parallelism over MPI on this machine, in one run: the small model
# (configs/small.json) on the KJV text, the same global batch (8 x SEQ tokens in micro-batches of
# 2) in one process and in jobs of 2 and 4 ranks (data parallel with and without ZeRO-1; context
# parallel, --cp 2 and --cp 4, each sequence split over the ranks; tensor + sequence parallel,
# --tp 2, --tp 4 and --tp 2 --cp 2), the same total of OpenMP threads where the
# cores allow (one process: 2 threads; 2 ranks: 1 each; 4 ranks: 1 each, oversubscribed on a
# 2-core machine). Per step, from the JSON logs (steps after the first): tokens/s and its ratio to
# one process, the bytes rank 0 sent in collectives against the formula
# (all-reduce of fp32 gradients: 2 (P - 1) / P x 4 x slots; ZeRO-1 adds rank 0's shard sent to
# P - 1 ranks; context parallel: per layer and micro-batch, C - 1 key/value blocks [2 x SEQ / C,
# Hkv D] forward and 2 (C - 1) + 1 backward (Note [Context parallel layout]), the gradients summed
# over the group after each micro-batch, 8 bytes of loss; tensor parallel: what `memo plan --tp T
# [--cp C]` predicts per micro-batch (the layers' gathers and reduce-scatters, the embedding's
# and the loss's), times the micro-batches, plus the norms' gradients and the gradient norm summed
# over the group once a step; the TP rows run without the noise probe (--no-gns), so a
# context-parallel group sums the gradients once a step), and the share of the step rank 0 spent inside collectives: the
# time a step waits for them. The -overlap rows run without the noise probe, so the last
# micro-batch's backward starts each part's reduction as it becomes final (Note [Overlapped
# gradient reduction]); the other DP rows reduce after the backward (the probe reads every
# micro-batch's local gradient). The ring and the TP collectives run between the products.
# Usage: bench/data_parallel.sh [SEQ] [STEPS]   (default: 256 8)
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-256}
steps=${2:-8}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, $(date -u +%F)"
echo "small model, --seq $seq --batch 8 --micro-batch 2, $steps steps; figures: median over steps 2..$steps"
run() {  # name ranks threads zero cp tp [extra flags]
  local name=$1 ranks=$2 threads=$3 zero=$4 cp=${5:-1} tp=${6:-1} launch=()
  local extra=("${@:7}")
  ((ranks > 1)) && launch=(mpirun --oversubscribe --bind-to none -np "$ranks")
  OMP_NUM_THREADS=$threads "${launch[@]}" build/memo train --config configs/small.json \
    --data data/kjv.txt --seq "$seq" --batch 8 --micro-batch 2 --steps "$steps" --lr 2e-3 \
    --warmup 2 --val-batches 1 --zero "$zero" --cp "$cp" --tp "$tp" "${extra[@]}" --out "$work/$name" \
    --log "$work/$name.jsonl" > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
  if ((tp > 1)); then  # what memo plan predicts a rank sends per micro-batch
    OMP_NUM_THREADS=1 build/memo plan --config configs/small.json --batch 2 --seq "$seq" \
      --tp "$tp" --cp "$cp" --json > "$work/$name.plan.json"
  fi
}
run one 1 2 0
run dp2 2 1 0
run dp2-zero1 2 1 1
run dp4 4 1 0
run dp2-overlap 2 1 0 1 1 --no-gns
run dp4-overlap 4 1 0 1 1 --no-gns
run cp2 2 1 0 2
run cp4 4 1 0 4
run tp2 2 1 0 1 2 --no-gns
run tp4 4 1 0 1 4 --no-gns
run tp2cp2 4 1 0 2 2 --no-gns
/usr/bin/python3 - "$work" "$seq" <<'EOF'
import json, re, statistics, sys
work, seq = sys.argv[1], int(sys.argv[2])
def load(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")][1:]
for line in open(f"{work}/dp2-zero1.out"):
    m = re.search(r"ZeRO-1: .* (\d+) of (\d+) parameter slots on rank 0", line)
    if m:
        shard0, slots = int(m.group(1)), int(m.group(2))
config = json.load(open("configs/small.json"))
layers = config["num_hidden_layers"]
kv_width = config["num_key_value_heads"] * config["hidden_size"] // config["num_attention_heads"]
base = statistics.median(r["tokens_per_s"] for r in load("one"))
print(f"{'run':<10} {'ranks':>5} {'cp':>3} {'tp':>3} {'tok/s':>9} {'vs 1':>6} "
      f"{'comm MB/step':>13} {'formula MB':>11} {'comm share':>11} {'last loss':>10}")
for name, ranks, zero, cp, tp in [("one", 1, 0, 1, 1), ("dp2", 2, 0, 1, 1),
                                  ("dp2-zero1", 2, 1, 1, 1), ("dp4", 4, 0, 1, 1),
                                  ("dp2-overlap", 2, 0, 1, 1), ("dp4-overlap", 4, 0, 1, 1),
                                  ("cp2", 2, 0, 2, 1), ("cp4", 4, 0, 4, 1), ("tp2", 2, 0, 1, 2),
                                  ("tp4", 4, 0, 1, 4), ("tp2cp2", 4, 0, 2, 2)]:
    rs = load(name)
    tps = statistics.median(r["tokens_per_s"] for r in rs)
    comm = statistics.median(r["comm_bytes"] + r.get("cp_comm_bytes", 0) +
                             r.get("tp_comm_bytes", 0) for r in rs)
    # the share of the step rank 0 spent inside collectives: comm_s / (tokens per step / tok/s)
    share = statistics.median((r["comm_s"] + r.get("cp_comm_s", 0.0) + r.get("tp_comm_s", 0.0)) *
                              r["tokens_per_s"] / (r["batch"] * seq) for r in rs)
    formula = 0.0
    dp = ranks // (cp * tp)
    if dp > 1:
        formula = 2 * (dp - 1) / dp * 4 * slots
        if zero:
            formula += 4 * shard0 * (dp - 1)
    if tp > 1:
        plan = json.load(open(f"{work}/{name}.plan.json"))
        micro = 8 // 2 // dp
        norms = 2 * layers + 1
        formula += micro * (plan["tp_bytes_per_micro_batch"] + plan.get("cp_bytes_per_micro_batch", 0))
        formula += norms * (2 * 4 * config["hidden_size"] * (tp - 1) // tp) + 8 * (tp - 1)
        if cp > 1:  # the rank's gradients summed over the context-parallel group once
            formula += 2 * (cp - 1) * plan["need"]["gradient_bytes"] // cp
    elif cp > 1:
        micro = 8 // 2 // dp  # micro-batches per rank; the noise probe sums each one's gradients
        block = 2 * seq // cp * kv_width * 4
        formula += layers * micro * ((cp - 1) * 6 + 2) * block
        formula += micro * (2 * (cp - 1) * 4 * slots // cp + 8 * (cp - 1))
    print(f"{name:<10} {ranks:>5} {cp:>3} {tp:>3} {tps:>9.0f} {tps / base:>6.2f} "
          f"{comm / 1e6:>13.3f} {formula / 1e6:>11.3f} {100 * share:>10.1f}% {rs[-1]['loss']:>10.6f}")
EOF
