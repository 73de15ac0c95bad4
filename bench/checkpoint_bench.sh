#!/usr/bin/env bash
# The training time a checkpoint costs, synchronous against --async-save (Note [Asynchronous
# checkpoints]), in one run: a 205M-parameter LLaMA (hidden 1024, 12 layers, vocabulary 32000;
# its checkpoint is 2.5 GB: fp32 weights and AdamW's two moments) on the KJV text, --seq 64
# --batch 1, STEPS steps, with no checkpoint (the baseline), then a checkpoint every EVERY steps
# written synchronously and in the background, into a temporary directory on the disk of /tmp.
# Per run, from the JSON log: the training time to the last step (elapsed_s: steps, validation
# and the checkpoints written before the last step, waits included) and its excess over the
# baseline per checkpoint before the last (the last one is never hidden: the end of the run waits
# for it), and the process's wall time. THREADS (default: every core) sets OMP_NUM_THREADS: with
# fewer threads than cores the background write has a core of its own, as on a GPU node, where
# the host's cores are idle while the GPU trains. Usage: THREADS=N bench/checkpoint_bench.sh
# [STEPS] [EVERY]   (default 12 4)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-12}
every=${2:-4}
if ((every < 1 || steps <= every)); then
  echo "checkpoint_bench: STEPS $steps must exceed EVERY $every >= 1 (a checkpoint before the last step to time)" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/config.json" <<'EOF'
{"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 12,
 "num_attention_heads": 16, "num_key_value_heads": 8, "vocab_size": 32000, "rms_norm_eps": 1e-5,
 "rope_theta": 10000.0, "max_position_embeddings": 2048, "tie_word_embeddings": false}
EOF
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc --all) cores, $(date -u +%F)"
threads=${THREADS:-$(nproc --all)}
echo "205M-parameter LLaMA, --seq 64 --batch 1, $steps steps; checkpoints every $every steps;" \
  "$threads training threads"
run() {  # name [flags]
  local name=$1 t0 t1
  t0=$(date +%s.%N)
  OMP_NUM_THREADS=$threads build/memo train --config "$work/config.json" --data data/kjv.txt --seq 64 --batch 1 \
    --steps "$steps" --warmup 1 --val-batches 1 --keep-last 1 "${@:2}" --out "$work/$name" \
    --log "$work/$name.jsonl" > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v n="$name" 'BEGIN { print n, b - a }' >> "$work/times"
  rm -rf "${work:?}/$name"
}
run none --no-checkpoint
run sync --save-every "$every"
run async --save-every "$every" --async-save
/usr/bin/python3 - "$work" "$steps" "$every" <<'EOF'
import json, sys
work, steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
wall = dict((n, float(t)) for n, t in (l.split() for l in open(f"{work}/times")))
train = {n: json.loads(open(f"{work}/{n}.jsonl").readlines()[-1])["elapsed_s"] for n in wall}
before_last = (steps - 1) // every  # checkpoints written before the last step
print(f"{'run':<6} {'train s':>8} {'x none':>7} {'s lost per checkpoint':>22} {'process s':>10}")
for name in ("none", "sync", "async"):
    lost = (train[name] - train["none"]) / before_last if name != "none" else 0.0
    print(f"{name:<6} {train[name]:8.1f} {train[name] / train['none']:7.3f} {lost:22.2f} "
          f"{wall[name]:10.1f}")
print(f"{before_last} checkpoints before the last step; async / sync time lost: "
      f"{(train['async'] - train['none']) / max(train['sync'] - train['none'], 1e-9):.2f}")
EOF
