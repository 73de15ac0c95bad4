#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one call on a lent GPU machine (the device tool runs it in
# the repository root of a copy of the working tree). That machine has the CUDA toolkit and
# PyTorch but none of memo's Debian libraries, so memo is built here and carried:
#   scripts/gpu-check.sh prepare   (here: builds memo, memo_cuda_tests, memo_nccl_check and
#                                   memo_cuda_attention_bench for x86-64-v3 into build-gpu/, and
#                                   packs them with the Debian libraries they need and the KJV
#                                   corpus into build-gpu/bundle.tar.xz, about 24 MB)
#   scripts/gpu-check.sh           (there, carrying build-gpu/bundle.tar.xz)
# There it runs, each stage under its own time limit, in about 7 minutes on one H200 (a stage that
# would start past GPU_CHECK_BUDGET_S, 420 s, is skipped and says so; GPU_CHECK_ONLY="kernels
# bench_*" runs only the stages whose names match those globs), in the order of what a short lease
# must learn first:
#   1. the CUDA backend against the CPU backend, kernel by kernel (memo_cuda_tests);
#   2. bf16 mixed precision: 20 quickstart steps on the GPU against the same bf16 run on the CPU,
#      then keep, recompute, offload, memo, offload under a throttled (delayed) copy link and memo
#      in the static plan's arena, 6 steps each on the GPU in bf16: identical losses;
#   3. tokens/s, MFU and the copy time hidden under compute of a ~1B LLaMA at 4K tokens in bf16
#      under keep (with the GPU time per kernel entry point: MEMO_CUDA_PROFILE), memo and
#      recompute, and PyTorch's on the same model (scripts/torch_gpu_bench.py: bf16 autocast, and
#      with checkpointed layers);
#   4. attention forward and backward at 4K and 32K tokens (the ~1B model's heads): the fused
#      bf16 kernels against the chunked schedule in bf16, the chunked schedule in fp32, and
#      PyTorch's SDPA (bench/cuda/attention_bench.cc, scripts/torch_gpu_attention.py);
#   5. the quickstart's run (60 steps) in fp32 on the GPU and, in the background, on the CPU: the
#      losses compared step by step; memo eval of its checkpoint on both, memo generate on the GPU;
#      then transformers loading memo's checkpoints of five architectures (not yet run);
#   6. the NCCL communicator's check, and 20 training steps on the GPU twice (they must repeat bit
#      for bit) and reduced over NCCL (one GPU; the same losses); Adafactor on both backends;
#   7. keep, memo and recompute in bf16 at 32K beside PyTorch's bf16 with and without
#      checkpointing, and the longest sequence keep, recompute and memo fit in the GPU's memory in
#      bf16 (the plan's advice).
# It writes gpu-check.log, gpu-check.json (the numbers of each stage) and gpu-check-runs.tar.gz (each
# stage's own output: kernels.json names a failing kernel test) to $OUT when that is set, else to
# /tmp: three files, where the device tool brings back at most eight.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "prepare" ]]; then
  set -e
  mkdir -p build-gpu
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMO_MARCH=x86-64-v3 \
    -DMEMO_WERROR=OFF > build-gpu/configure.log 2>&1 || { cat build-gpu/configure.log; exit 1; }
  cmake --build build-gpu -j"$(nproc)" --target memo memo_cuda_tests memo_nccl_check \
    memo_cuda_attention_bench
  rm -rf build-gpu/bundle && mkdir -p build-gpu/bundle/lib build-gpu/bundle/data
  cp build-gpu/memo build-gpu/memo_cuda_tests build-gpu/memo_nccl_check \
    build-gpu/memo_cuda_attention_bench build-gpu/bundle/
  # memo keeps its symbols
  strip build-gpu/bundle/memo_cuda_tests build-gpu/bundle/memo_nccl_check \
    build-gpu/bundle/memo_cuda_attention_bench
  # Debian's libraries (oneDNN, CBC, Open MPI, OpenBLAS, ...): not glibc or libstdc++, not CUDA's
  for b in memo memo_cuda_tests memo_nccl_check memo_cuda_attention_bench; do
    ldd "build-gpu/$b" | awk '/=> \/(usr\/)?lib\/x86_64-linux-gnu\// {print $3}' |
      grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux)[.-]'
  done | sort -u | xargs -r cp -L -t build-gpu/bundle/lib
  # Open MPI opens its components at run time
  cp -r /usr/lib/x86_64-linux-gnu/openmpi build-gpu/bundle/lib/ 2>/dev/null || true
  mkdir -p data  # the corpus, as scripts/quickstart.sh makes it (bible-kjv: scripts/install-deps.sh)
  if [[ ! -s data/kjv.txt ]]; then
    bible gen1:1-rev22:21 > data/kjv.txt.tmp && mv data/kjv.txt.tmp data/kjv.txt
  fi
  cp data/kjv.txt build-gpu/bundle/data/
  tar -C build-gpu -cJf build-gpu/bundle.tar.xz bundle
  echo "gpu-check: build-gpu/bundle.tar.xz ($(du -h build-gpu/bundle.tar.xz | cut -f1)): carry it"
  exit 0
fi

out=${OUT:-/tmp}
log=$out/gpu-check.log
exec > >(tee "$log") 2>&1
t_start=$(date +%s)
echo "gpu-check: $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader || true
[[ -s build-gpu/bundle.tar.xz ]] || { echo "gpu-check: run 'scripts/gpu-check.sh prepare' here and carry build-gpu/bundle.tar.xz"; exit 1; }
work=/tmp/memo-gpu
rm -rf "$work" && mkdir -p "$work" && tar -C "$work" -xJf build-gpu/bundle.tar.xz
b=$work/bundle
cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$b/lib:$cuda_libs${LD_LIBRARY_PATH:-}"
export OPAL_PREFIX="$b/lib/openmpi" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# cuBLASLt (opened at run time by the CUDA backend, so ldd does not list it), NCCL or the runtime
# may live only in PyTorch's wheels (nvidia-*) on an image without the toolkit's: after the
# toolkit's folders, theirs
extra=$(python3 -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null)
[[ -n $extra ]] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$extra"
if ldd "$b/memo" "$b/memo_cuda_tests" | grep -q "not found"; then
  echo "gpu-check: libraries missing:"; ldd "$b/memo" "$b/memo_cuda_tests" | grep "not found"
  exit 1
fi
runs=$work/runs
mkdir -p "$runs"
declare -A status
stage() {  # name, limit (s), command...
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  if [[ -n ${GPU_CHECK_ONLY:-} ]]; then  # a subset: the stages whose names match these globs
    local pat keep=0
    for pat in $GPU_CHECK_ONLY; do [[ $name == $pat ]] && keep=1; done
    if (( !keep )); then
      status[$name]="-2 0"
      return
    fi
  fi
  if (( t0 - t_start > ${GPU_CHECK_BUDGET_S:-420} )); then  # the lease is short: stop starting
    echo "=== $name: skipped (past ${GPU_CHECK_BUDGET_S:-420}s)" >&2
    status[$name]="-1 0"
    return
  fi
  echo "=== $name (limit ${limit}s)" >&2
  timeout "$limit" "$@"
  local rc=$?
  status[$name]="$rc $(( $(date +%s) - t0 ))"
  echo "=== $name: exit $rc in $(( $(date +%s) - t0 ))s" >&2
}

# The stages run in the order of what a short lease must learn first: what has never run on a GPU
# (bf16, every strategy in it, the 1B step's profile, the fused attention against PyTorch's), then
# what ran once before (fp32 against the CPU, NCCL, repeats), then the longest runs.
# 1. kernels
stage kernels 90 "$b/memo_cuda_tests" --gtest_output=json:"$runs/kernels.json"

# (fp32 unless a stage says bf16: --device cuda defaults to bf16; a flag's last value counts)
quick=(train --config configs/small.json --data "$b/data/kjv.txt" --seq 256 --batch 8
       --steps 60 --lr 2e-3 --warmup 20 --save-every 0 --hardware-dir hardware --precision fp32)
# Document masks (issue 25): a document starts at each line of the KJV text (byte 10), so the
# 1,024-token windows hold dozens; bf16 runs the fused kernels' key_start, fp32 the chunked
# schedule's. Against the same runs on the CPU.
docmask=(train --config configs/small.json --data "$b/data/kjv.txt" --seq 1024 --batch 2
         --steps 6 --lr 2e-3 --warmup 2 --no-checkpoint --document-mask --eot-id 10
         --eod-mask-loss --hardware-dir hardware)
# the CPU's side of every GPU-against-CPU comparison, in the background on 12 of the 16 cores
(
  OMP_NUM_THREADS=12 timeout 300 "$b/memo" "${quick[@]}" --device cpu --out "$runs/cpu" \
    --log "$runs/cpu.jsonl" > "$runs/cpu.out" 2>&1
  OMP_NUM_THREADS=12 timeout 120 "$b/memo" "${quick[@]}" --steps 20 --precision bf16 \
    --device cpu --out "$runs/bf16_cpu" --log "$runs/bf16_cpu.jsonl" > "$runs/bf16_cpu.out" 2>&1
  OMP_NUM_THREADS=12 timeout 120 "$b/memo" train --config configs/small.json \
    --data "$b/data/kjv.txt" --seq 256 --batch 8 --steps 8 --optimizer adafactor --save-every 0 \
    --val-batches 1 --precision fp32 --device cpu --out "$runs/af_cpu" --log "$runs/af_cpu.jsonl" \
    > "$runs/af_cpu.out" 2>&1
  for p in bf16 fp32; do  # document masks' CPU side (docmask_* below)
    OMP_NUM_THREADS=12 timeout 60 "$b/memo" "${docmask[@]}" --precision "$p" --device cpu \
      --log "$runs/dm_${p}_cpu.jsonl" > "$runs/dm_${p}_cpu.out" 2>&1
  done
) &
cpu_pid=$!
# 2. bf16 mixed precision (Note [bf16 bodies]: cuBLASLt bf16 products, the row and elementwise
# kernels on bf16 storage, the fused attention): 20 quickstart steps against the same bf16 run on
# the CPU, then every strategy in bf16 on two micro-batches of 1,024 tokens (memo splits at
# 256-row panels): identical losses
stage bf16_cuda 60 "$b/memo" "${quick[@]}" --steps 20 --precision bf16 --device cuda \
  --out "$runs/bf16_cuda" --log "$runs/bf16_cuda.jsonl"
if [[ ${status[bf16_cuda]%% *} == 139 ]] && command -v cuda-gdb > /dev/null; then  # where it crashed
  timeout 60 cuda-gdb -batch -ex run -ex bt --args "$b/memo" "${quick[@]}" --steps 2 \
    --precision bf16 --device cuda --out "$runs/gdb" 2>&1 | tail -40
fi
# generation on the GPU from the bf16 run's checkpoint (the KV decoder computes in f32 beside the
# bf16 layers: the first GPU run's memo generate failed on its attention scratch)
stage gpu_generate_bf16 45 "$b/memo" generate --checkpoint "$runs/bf16_cuda" \
  --prompt "In the beginning" --max-new-tokens 48 --device cuda
for s in keep recompute offload memo throttled planned; do
  args=(--activations "$s")
  [[ $s == memo ]] && args+=(--alpha 0.5)
  [[ $s == throttled ]] && args=(--activations offload --copy-bandwidth 2)
  # memo inside the static plan: one device arena, refused before step 1 if it does not fit
  [[ $s == planned ]] && args=(--activations memo --alpha 0.5 --device-memory 1GiB)
  stage "bf16_strategy_$s" 45 "$b/memo" train --config configs/small.json \
    --data "$b/data/kjv.txt" --seq 1024 --batch 2 --micro-batch 1 --steps 6 --lr 2e-3 \
    --save-every 0 --device cuda --precision bf16 --out "$runs/bs_$s" --log "$runs/bs_$s.jsonl" \
    "${args[@]}"
done
# document masks on the GPU (never run there before): the fused kernels' key_start, the chunked
# schedule's masks
for p in bf16 fp32; do
  stage "docmask_$p" 45 "$b/memo" "${docmask[@]}" --precision "$p" --device cuda \
    --log "$runs/dm_${p}_cuda.jsonl"
done
# 3. a ~1B LLaMA at 4K tokens in bf16: keep with the GPU time per kernel entry point (Note
# [Kernel profile] in cuda/backend_impl.cuh), memo, and PyTorch on the same model (bf16 autocast,
# and bf16 with checkpointed layers; its fp32 is in bench/RESULTS.md since 2026-11-30)
cat > "$runs/llama1b.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
 "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 16,
 "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 32768,
 "tie_word_embeddings": false, "initializer_range": 0.02, "torch_dtype": "float32"}
JSON
for s in keep memo recompute; do
  [[ $s == keep ]] && export MEMO_CUDA_PROFILE=1 || unset MEMO_CUDA_PROFILE
  stage "bench_bf16_$s" 60 "$b/memo" train --config "$runs/llama1b.json" \
    --data "$b/data/kjv.txt" --seq 4096 --batch 1 --steps 3 --warmup 0 --lr 1e-4 \
    --no-checkpoint --val-batches 0 --device cuda --precision bf16 --activations "$s" \
    --out "$runs/b_bf16_$s" --log "$runs/b_bf16_$s.jsonl" --hardware-dir hardware \
    --device-memory 0  # the caching allocator: no traced micro-batch first
done
unset MEMO_CUDA_PROFILE
stage torch_1b 90 python3 scripts/torch_gpu_bench.py "$runs/llama1b.json" 4096 3 bf16 bf16_ckpt \
  > >(tee "$runs/torch.jsonl")
# 4. attention alone
stage attention 120 "$b/memo_cuda_attention_bench" 4096 32768 > >(tee "$runs/attention.jsonl")
stage torch_attention 60 python3 scripts/torch_gpu_attention.py 4096 32768 \
  > >(tee "$runs/torch_attention.jsonl")
# 5. the quickstart's run in fp32 on the GPU against the CPU's (in the background above), its
# checkpoint evaluated on both backends, a few tokens generated on the GPU
stage gpu_run 90 "$b/memo" "${quick[@]}" --device cuda --out "$runs/gpu" --log "$runs/gpu.jsonl"
stage gpu_eval 45 "$b/memo" eval --checkpoint "$runs/gpu" --data "$b/data/kjv.txt" --batches 8 \
  --device cuda --precision fp32 > "$runs/eval_gpu.json"
stage cpu_eval 45 "$b/memo" eval --checkpoint "$runs/gpu" --data "$b/data/kjv.txt" --batches 8 \
  > "$runs/eval_cpu.json"
stage gpu_generate 45 "$b/memo" generate --checkpoint "$runs/gpu" --prompt "In the beginning" \
  --max-new-tokens 64 --device cuda
# 5b. transformers reads memo's checkpoints (issue #24): Llama with llama3 scaling and biases,
# Qwen2 with YaRN, Qwen3, Mistral with its window, GPT-2, each trained 2 steps by memo (CPU) and
# loaded by AutoModelForCausalLM; its float64 logits against the test suite's float64 reference
# (scripts/hf_transformers_check.py; skipped, and says so, where transformers is missing)
stage transformers 120 python3 scripts/hf_transformers_check.py "$b/memo" "$b/data/kjv.txt" \
  "$runs/hf" > >(tee "$runs/transformers.jsonl")
# 6. NCCL: its own check, then training whose reductions go over NCCL (a group of one GPU), which
# must give the losses of the same run without it, bit for bit; the plain run twice (a GPU run
# repeats bit for bit)
stage nccl 45 "$b/memo_nccl_check"
for n in plain repeat nccl; do
  args=()
  [[ $n == nccl ]] && args=(--nccl)
  stage "train_$n" 45 "$b/memo" "${quick[@]}" --steps 20 --device cuda --out "$runs/t_$n" \
    --log "$runs/t_$n.jsonl" "${args[@]}"
done
# Adafactor (factored second moments) on the GPU, 8 steps (the CPU's in the background above)
stage adafactor_cuda 45 "$b/memo" train --config configs/small.json --data "$b/data/kjv.txt" \
  --seq 256 --batch 8 --steps 8 --optimizer adafactor --save-every 0 --val-batches 1 \
  --precision fp32 --device cuda --out "$runs/af_cuda" --log "$runs/af_cuda.jsonl"
# 7. the ~1B model at 32K tokens in bf16, keep, memo and recompute, beside PyTorch's bf16 with and
# without checkpointing; then the longest sequence each strategy fits in the GPU's memory in bf16:
# a run at 1M tokens (more than any strategy fits) is refused before step 1 with the planned need
# and the longest --seq that fits (estimated from the scaled plan), which the summary reads
for s in keep memo recompute; do
  stage "bench32k_bf16_$s" 90 "$b/memo" train --config "$runs/llama1b.json" \
    --data "$b/data/kjv.txt" --seq 32768 --batch 1 --steps 2 --warmup 0 --lr 1e-4 \
    --no-checkpoint --val-batches 0 --device cuda --precision bf16 --activations "$s" \
    --out "$runs/b32_$s" --log "$runs/b32_$s.jsonl" --hardware-dir hardware --device-memory 0
done
stage torch_32k 120 python3 scripts/torch_gpu_bench.py "$runs/llama1b.json" 32768 3 bf16 \
  bf16_ckpt > >(tee "$runs/torch32k.jsonl")
sed 's/"max_position_embeddings": 32768/"max_position_embeddings": 1048576/' "$runs/llama1b.json" \
  > "$runs/llama1b_long.json"
for s in keep recompute memo; do
  stage "fit_$s" 60 "$b/memo" train --config "$runs/llama1b_long.json" --data "$b/data/kjv.txt" \
    --seq 1048576 --batch 1 --steps 1 --no-checkpoint --val-batches 0 --device cuda \
    --precision bf16 --activations "$s" --out "$runs/fit_$s" > "$runs/fit_$s.out" 2>&1
  tail -2 "$runs/fit_$s.out"
done
wait "$cpu_pid"
echo "cpu runs: exit $? ($(tail -c 300 "$runs/cpu.out" | tr '\n' ' '))"

# the summary
for k in "${!status[@]}"; do
  [[ ${status[$k]} == "-2 0" ]] || echo "$k ${status[$k]}"
done > "$runs/status.txt"
python3 - "$runs" "$out/gpu-check.json" <<'EOF'
import json, os, sys
runs, dest = sys.argv[1], sys.argv[2]
def losses(name):
    p = os.path.join(runs, name + ".jsonl")
    if not os.path.exists(p): return []
    return [json.loads(l) for l in open(p) if l.strip().startswith("{")]
def steps(recs): return [r for r in recs if "loss" in r and "step" in r]
out = {"stages": {}}
for line in open(os.path.join(runs, "status.txt")):
    k, rc, s = line.split()
    out["stages"][k] = {"exit": int(rc), "seconds": int(s)}
try:
    k = json.load(open(os.path.join(runs, "kernels.json")))
    out["kernel_tests"] = {"tests": k["tests"], "failures": k["failures"],
                           "skipped": sum(1 for s in k["testsuites"] for t in s["testsuite"] if t.get("result") == "SKIPPED"),
                           "failed": {s["name"] + "." + t["name"]: [f["failure"][:800] for f in t["failures"]]
                                      for s in k["testsuites"] for t in s["testsuite"] if t.get("failures")}}
except Exception as e:
    out["kernel_tests"] = str(e)
cpu, gpu, gpu2 = steps(losses("cpu")), steps(losses("gpu")), steps(losses("t_repeat"))
if cpu and gpu:
    rel = [abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(gpu, cpu)]
    out["gpu_vs_cpu"] = {"steps": len(rel), "step1_rel": rel[0], "max_rel_first10": max(rel[:10]),
                         "max_rel": max(rel), "final_loss_gpu": gpu[-1]["loss"],
                         "final_loss_cpu": cpu[-1]["loss"],
                         "tokens_per_s_gpu": gpu[-1].get("tokens_per_s"),
                         "tokens_per_s_cpu": cpu[-1].get("tokens_per_s")}
try:
    eg, ec = (json.load(open(os.path.join(runs, f))) for f in ("eval_gpu.json", "eval_cpu.json"))
    out["eval_gpu_vs_cpu"] = {"gpu": eg["loss"], "cpu": ec["loss"],
                              "rel": abs(eg["loss"] - ec["loss"]) / ec["loss"]}
except Exception as e:
    out["eval_gpu_vs_cpu"] = str(e)
tp = steps(losses("t_plain"))
if tp and gpu2:
    out["gpu_repeat_bitwise"] = [a["loss"] for a in tp] == [a["loss"] for a in gpu2]
tp, tn = steps(losses("t_plain")), steps(losses("t_nccl"))
if tp and tn:
    out["nccl_train_bitwise"] = [r["loss"] for r in tp] == [r["loss"] for r in tn]
afg, afc = steps(losses("af_cuda")), steps(losses("af_cpu"))
if afg and afc:
    out["adafactor_gpu_vs_cpu_max_rel"] = max(abs(a["loss"] - b["loss"]) / abs(b["loss"])
                                              for a, b in zip(afg, afc))
strats = ["keep", "recompute", "offload", "memo", "throttled", "planned"]
st = {s: [r["loss"] for r in steps(losses("bs_" + s))] for s in strats}
out["bf16_strategies"] = {"losses_keep": st["keep"],
                          "copy_hidden": {s: (steps(losses("bs_" + s)) or [{}])[-1].get("copy_hidden")
                                          for s in strats[2:]},
                          "identical_to_keep": {s: (v == st["keep"] and len(v) > 0)
                                                for s, v in st.items()}}
bg, bc, g32 = steps(losses("bf16_cuda")), steps(losses("bf16_cpu")), steps(losses("gpu"))
if bg and bc:
    rel = [abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(bg, bc)]
    # both round the same f32 results once; only the order of f32 sums differs, so step 1's loss
    # must agree well within u = 2^-9 (later steps drift as the fp32 runs do)
    out["bf16_gpu_vs_bf16_cpu"] = {"steps": len(rel), "step1_rel": rel[0], "max_rel": max(rel),
                                   "step1_bound": 2.0 ** -9}
# document masks: the GPU's losses against the CPU's, step 1 within the bound of the unmasked
# runs above (bf16: u = 2^-9; fp32: issue 10's 1e-5)
for p, bound in (("bf16", 2.0 ** -9), ("fp32", 1e-5)):
    g, c = steps(losses("dm_%s_cuda" % p)), steps(losses("dm_%s_cpu" % p))
    if g and c:
        rel = [abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(g, c)]
        out["docmask_%s_gpu_vs_cpu" % p] = {"steps": len(rel), "step1_rel": rel[0],
                                           "max_rel": max(rel), "step1_bound": bound,
                                           "step1_within_bound": rel[0] <= bound}
if bg and g32:
    out["bf16_vs_fp32_gpu_step1_rel"] = abs(bg[0]["loss"] - g32[0]["loss"]) / g32[0]["loss"]
for s in ["bf16_keep", "bf16_memo", "bf16_recompute"]:
    r = steps(losses("b_" + s))
    if r:
        out["bench_1b_4k_" + s] = {"tokens_per_s": r[-1].get("tokens_per_s"), "mfu": r[-1].get("mfu"),
                                   "mfu_peak": r[-1].get("mfu_peak"),
                                   "copy_hidden": r[-1].get("copy_hidden"),
                                   "peak_bytes": r[-1].get("peak_bytes"), "loss": r[-1]["loss"]}
for s in ["keep", "memo", "recompute"]:
    r = steps(losses("b32_" + s))
    if r:
        out["bench_1b_32k_bf16_" + s] = {"tokens_per_s": r[-1].get("tokens_per_s"),
                                         "mfu": r[-1].get("mfu"), "mfu_peak": r[-1].get("mfu_peak"),
                                         "copy_hidden": r[-1].get("copy_hidden"),
                                         "peak_bytes": r[-1].get("peak_bytes"),
                                         "loss": r[-1]["loss"]}
import re
for s in ["keep", "recompute", "memo"]:
    p = os.path.join(runs, "fit_" + s + ".out")
    if os.path.exists(p):
        text = open(p).read()
        m = re.search(r"--seq (\d+) fits this budget", text)
        b = re.search(r"budget is [0-9.]+ GiB \((\d+) B\)", text)
        out["longest_seq_bf16_" + s] = {"seq": int(m.group(1)) if m else None,
                                        "budget_bytes": int(b.group(1)) if b else None,
                                        "message": text.strip().splitlines()[-1][:600] if text.strip() else ""}
for name in ["attention", "torch_attention", "transformers"]:
    p = os.path.join(runs, name + ".jsonl")
    if os.path.exists(p):
        out[name] = [json.loads(l) for l in open(p) if l.startswith("{")]
for name, key in [("torch.jsonl", "torch_1b_4k"), ("torch32k.jsonl", "torch_1b_32k")]:
    tp = os.path.join(runs, name)
    if os.path.exists(tp):
        out[key] = [json.loads(l) for l in open(tp) if l.startswith("{")]
json.dump(out, open(dest, "w"), indent=1)
print(json.dumps(out, indent=1)[:6000])
EOF
# every stage's own output beside the log, in one file ($OUT brings back at most 8)
(cd "$runs" && tar -czf "$out/gpu-check-runs.tar.gz" $(ls *.out *.jsonl *.json *.txt 2>/dev/null))
echo "gpu-check: done in $(( $(date +%s) - t_start ))s"
