#!/usr/bin/env bash
# The MEMO paper's cases planned by `memo plan --gpus` on this machine: 7B (GPT, Table 2) at
# 1,048,576 tokens on 8 A800 80GB with 2 TiB of host memory and TP 8, under each strategy; and the
# longest sequence each strategy fits for 7B on 8 GPUs (TP 8) and 65B on 64 GPUs (TP 8 x CP 8),
# beside the paper's figures (memo-notes.md section 7). Ratios are against memo's `recompute` in
# the same run (full recomputation with TP+SP: what the paper's Megatron-LM baseline most likely
# ran). Planning time is the wall clock of each `memo plan` command (every strategy, including
# the bisection for the longest sequence).
# Usage: bench/paper_plans.sh [MEMO_BIN] [extra memo plan flags, e.g. --host-bandwidth 13]
set -euo pipefail
cd "$(dirname "$0")/.."
memo=${1:-build/memo}
shift || true
extra=("$@")
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%F); flags: ${extra[*]:-(defaults)}"
run() {  # name, then memo plan flags; prints the JSON to a file and the wall time
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  "$memo" plan "$@" "${extra[@]}" --compare --json > "/tmp/memo-paper-$name.json"
  t1=$(date +%s.%N)
  echo "$name $(echo "$t1 - $t0" | bc)"
}
times=$(
  run 7b-1m --model 7b --seq 1048576 --gpus 8 --gpu a800-80gb --tp 8 --host-memory 2TiB
  run 65b-1m --model 65b --seq 1048576 --gpus 64 --gpu a800-80gb --tp 8 --cp 8 --host-memory 2TiB
)
/usr/bin/python3 - "$times" <<'PY'
import json, sys
times = dict(l.split() for l in sys.argv[1].splitlines())
def load(name):
    return {s["strategy"]: s for s in json.load(open(f"/tmp/memo-paper-{name}.json"))["strategies"]}
gib = lambda b: b / 2**30
h = load("7b-1m")
print("\n7B (GPT, 32 x 4096, vocab 50257) at 1,048,576 tokens, 8 x A800 80GB, TP 8 (+SP), 2 TiB host")
print(f"{'strategy':10} {'fits':>5} {'device GiB':>11} {'alpha':>7} {'host GiB':>9} {'step s':>8} "
      f"{'MFU causal':>11} {'MFU non-c.':>11} {'vs recompute':>13}")
base = h["recompute"]["step_seconds"]
for k in ("keep", "recompute", "offload", "memo"):
    s = h[k]
    a = "-" if s["alpha"] is None else f"{s['alpha']:.3f}"
    print(f"{k:10} {str(s['fits']).lower():>5} {gib(s['device_need_bytes']):11.2f} {a:>7} "
          f"{gib(s['host_need_bytes']):9.1f} {s['step_seconds']:8.1f} {100*s['mfu_causal']:10.1f}% "
          f"{100*s['mfu_noncausal']:10.1f}% {base/s['step_seconds']:12.2f}x")
print("paper: MEMO fits at 52.30% MFU (formula not read; memo-notes 7.3)")
print("\nlongest sequence that fits (tokens), ratio to memo's recompute in the same run")
print(f"{'case':26} {'keep':>9} {'recompute':>10} {'offload':>9} {'memo':>9} {'memo/rec':>9}   paper (unverified, memo-notes 7.2)")
paper = {"7b-1m": "MEMO 1024K, Megatron 640K, DeepSpeed 256K", "65b-1m": "MEMO 1408K at 51.45% MFU"}
label = {"7b-1m": "7B, 8 GPUs, TP 8", "65b-1m": "65B, 64 GPUs, TP 8 x CP 8"}
for name in ("7b-1m", "65b-1m"):
    s = load(name)
    m = {k: s[k]["max_seq"] or 0 for k in s}
    r = m["memo"] / m["recompute"] if m["recompute"] else float("inf")
    c = {k: str(v) if v else "none" for k, v in m.items()}
    print(f"{label[name]:26} {c['keep']:>9} {c['recompute']:>10} {c['offload']:>9} {c['memo']:>9} {r:9.2f}   {paper[name]}")
print("\nplanning time (wall, all four strategies with their longest-sequence bisection):")
for name in ("7b-1m", "65b-1m"):
    s = load(name)
    inner = " ".join(f"{k} {s[k]['planning_seconds']:.2f}s" for k in ("keep", "recompute", "offload", "memo"))
    print(f"  {label[name]:26} {float(times[name]):.2f} s  ({inner})")
PY
