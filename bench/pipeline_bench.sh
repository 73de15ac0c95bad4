#!/usr/bin/env bash
# Pipeline parallelism on this machine (issue #26), in one run: configs/small.json on the KJV text
# (scripts/quickstart.sh makes data/kjv.txt), one process of 2 threads against `--pp 2` (2 ranks
# of 1 thread) and `--pp 4` (4 ranks of 1 thread on the same cores: oversubscribed, so its
# tokens/s says little) and `--pp 2 --tp 2` (4 ranks of 1 thread too), 1F1B with m micro-batches
# of one sequence per step, under keep and memo (--alpha 0.5). Prints tokens/s and its ratio to
# one process, the bubble measured on each stage (its seconds waiting on the pipeline over the
# rest of the step) beside (P - 1) / m, and each stage's activation peak; then memo at P = 4 in
# each stage's static plan (--device-memory): its arena and the bytes of it used per stage.
# Medians over the steps after the first.
# Usage: bench/pipeline_bench.sh [SEQ [MICRO_BATCHES [STEPS]]]   (default: 1024 8 6)
set -euo pipefail
cd "$(dirname "$0")/.."
S=${1:-1024}
M=${2:-8}
STEPS=${3:-6}
[[ -f data/kjv.txt ]] || { echo "data/kjv.txt is missing: run scripts/quickstart.sh first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'), $(nproc --all) cores, $(date -u +%F)"
echo "configs/small.json, seq $S, $M micro-batches of 1 sequence per step, $STEPS steps"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {  # name ranks flags...
  local name=$1 ranks=$2
  shift 2
  local cmd=(build/memo train --config configs/small.json --data data/kjv.txt --seq "$S" --batch "$M"
             --micro-batch 1 --steps "$STEPS" --lr 1e-3 --no-checkpoint --val-batches 1
             --log "$out/$name.jsonl" "$@")
  if ((ranks == 1)); then
    OMP_NUM_THREADS=2 "${cmd[@]}" > "$out/$name.out" 2>&1 || { cat "$out/$name.out"; exit 1; }
  else
    OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np "$ranks" "${cmd[@]}" \
      > "$out/$name.out" 2>&1 || { cat "$out/$name.out"; exit 1; }
  fi
}
for act in keep "memo --alpha 0.5"; do
  tag=${act%% *}
  run "one-$tag" 1 --activations $act
  run "pp2-$tag" 2 --activations $act --pp 2
  run "pp4-$tag" 4 --activations $act --pp 4
  run "pp2tp2-$tag" 4 --activations $act --pp 2 --tp 2
done
# memo at P = 4 in each stage's static plan of its step (--device-memory: a budget it fits)
run "pp4-memo-plan" 4 --activations memo --alpha 0.5 --pp 4 --device-memory 16GiB
/usr/bin/python3 - "$out" "$M" "$S" <<'PY'
import json, statistics, sys
out, m, S = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
med = statistics.median
def recs(name):  # the steps after the first
    return [json.loads(l) for l in open(f"{out}/{name}.jsonl")][1:]
print(f"{'run':<12} {'tok/s':>8} {'x one':>6} {'last loss':>10}  {'bubble per stage (formula)':<32} activation peak per stage, MiB")
for tag in ("keep", "memo"):
    base = med(r["tokens_per_s"] for r in recs(f"one-{tag}"))
    for P, name in ((1, f"one-{tag}"), (2, f"pp2-{tag}"), (4, f"pp4-{tag}"), (2, f"pp2tp2-{tag}")):
        rs = recs(name)
        tps = med(r["tokens_per_s"] for r in rs)
        step_s = m * S / tps
        if P == 1:
            bubble, peaks = "-", f"{med(r['peak_bytes'] for r in rs) / 2**20:.1f}"
        else:
            waits = [med(r["pp_stage_wait_s"][i] for r in rs) for i in range(P)]
            bubble = " ".join(f"{w / (step_s - w):.2f}" for w in waits) + f" ({(P - 1) / m:.3f})"
            peaks = " ".join(f"{med(r['pp_stage_peak_bytes'][i] for r in rs) / 2**20:.1f}" for i in range(P))
        print(f"{name:<12} {tps:8.0f} {tps / base:6.2f} {rs[-1]['loss']:10.4f}  {bubble:<32} {peaks}")
rs = recs("pp4-memo-plan")
tps = med(r["tokens_per_s"] for r in rs)
base = med(r["tokens_per_s"] for r in recs("pp4-memo"))
mib = lambda key: " ".join(f"{med(r[key][i] for r in rs) / 2**20:.1f}" for i in range(4))
print(f"pp4-memo in its static plan: {tps:.0f} tok/s, x{tps / base:.2f} against pp4-memo; "
      f"last loss {rs[-1]['loss']:.4f}; per stage, MiB: arena {mib('pp_stage_arena_bytes')}, "
      f"used {mib('pp_stage_arena_used_bytes')}, live peak {mib('pp_stage_peak_bytes')}; "
      f"hidden states on stage 0 {med(r['pp_hidden_bytes'] for r in rs) / 2**20:.1f} MiB")
PY
