#!/usr/bin/env bash
# memo against PyTorch on this machine, in one run: same architecture (configs/small.json, ~4.5M
# parameters), same threads (2), same batch and sequence; a full training step (forward,
# backward, AdamW), in fp32 and in bf16 (memo --precision bf16; PyTorch's bf16 autocast, with its
# fp32 master weights, as a PyTorch user runs mixed precision on a CPU). Prints tokens/s and peak
# resident memory of each, the memo/PyTorch ratios per precision, and memo's bf16 over fp32.
# Usage: bench/compare_torch.sh [SEQxBATCH ...]   (default: 1024x4 4096x1; a bare SEQ is batch 1)
set -euo pipefail
cd "$(dirname "$0")/.."
shapes=("$@"); ((${#shapes[@]})) || shapes=(1024x4 4096x1)
cfg=configs/small.json
threads=2
read -r C F L H KV V < <(/usr/bin/python3 -c "import json;c=json.load(open('$cfg'));print(c['hidden_size'],c['intermediate_size'],c['num_hidden_layers'],c['num_attention_heads'],c['num_key_value_heads'],c['vocab_size'])")
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads, $(date -u +%F)"
echo "bf16 flags: $(grep -o -w -E 'avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
printf '%-6s %-6s %-5s %12s %12s %8s %14s %14s %8s\n' seq batch prec memo_tok/s torch_tok/s ratio memo_peak_MiB torch_peak_MiB ratio
for shape in "${shapes[@]}"; do
  S=${shape%x*}; B=1; [[ $shape == *x* ]] && B=${shape#*x}
  declare -A memo_tps=()
  for prec in fp32 bf16; do
    autocast=none; [[ $prec == bf16 ]] && autocast=bf16
    m=$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads build/memo bench --config $cfg --seq "$S" --batch "$B" --steps 3 --precision $prec)
    # PyTorch at its best of two thread layouts (its OpenMP pool and OpenBLAS's pool, see
    # bench/torch_train_step.py Note [Two thread pools]): 2+1 and 2+2 threads.
    t=""
    for bt in 1 2; do
      r=$(/usr/bin/python3 bench/torch_train_step.py --hidden $C --intermediate $F --layers $L --heads $H \
          --kv-heads $KV --vocab $V --seq "$S" --batch "$B" --steps 3 --threads $threads --blas-threads $bt \
          --autocast $autocast --json)
      t=$(/usr/bin/python3 -c "import json,sys;a,b=sys.argv[1],sys.argv[2];print(b if not a or json.loads(b)['tokens_per_s']>json.loads(a)['tokens_per_s'] else a)" "$t" "$r")
    done
    memo_tps[$prec]=$(/usr/bin/python3 -c "import json,sys;print(json.loads(sys.argv[1])['tokens_per_s'])" "$m")
    /usr/bin/python3 - "$S" "$B" "$prec" "$m" "$t" <<'PY'
import json, sys
S, B, prec, m, t = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5])
mt, tt = m["tokens_per_s"], t["tokens_per_s"]
mp, tp = m["peak_rss_bytes"] / 2**20, t["peak_rss_bytes"] / 2**20
print(f"{S:<6} {B:<6} {prec:<5} {mt:12.0f} {tt:12.0f} {mt/tt:8.2f} {mp:14.1f} {tp:14.1f} {mp/tp:8.2f}")
print(f"       torch {t['dtype']}, threads {t['threads']}+{t['blas_threads_env']} (OpenMP+OpenBLAS), peak RSS over its pre-step baseline {t['peak_rss_increase_bytes']/2**20:.1f} MiB; memo activation peak {m['activation_peak_bytes']/2**20:.1f} MiB")
print(f"       memo MFU {100*m['mfu']:.1f}% of measured {prec} matmul peak {m['matmul_peak_flops']/1e9:.1f} GFLOP/s ({m['backend']})")
PY
  done
  /usr/bin/python3 -c "import sys;print(f'       memo bf16 / memo fp32: {float(sys.argv[2])/float(sys.argv[1]):.2f}')" "${memo_tps[fp32]}" "${memo_tps[bf16]}"
done
