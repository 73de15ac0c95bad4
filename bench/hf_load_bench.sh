#!/usr/bin/env bash
# Loading a Hugging Face folder: a random ~1.1B-parameter Llama (hidden 2048, 18 layers, GQA
# 16/8 heads; a byte vocabulary, so that eval needs no tokenizer file) written as bf16 shards of at most 1 GiB with
# model.safetensors.index.json, then `memo eval --checkpoint` on it (8 tokens, one batch: the
# time is the load, the fp32 conversion and one short forward). Prints memo's wall time and peak
# resident memory beside two baselines from the same run: reading the shards' bytes from the page
# cache (cat), and the model's own size in fp32 (what memo holds once loaded).
# Usage: bench/hf_load_bench.sh [BUILD_DIR]   (default build/; needs /usr/bin/python3 with numpy, as the tests do)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
[[ -n "${KEEP_DIR:-}" ]] && trap - EXIT && echo "kept $dir"
/usr/bin/python3 - "$dir" <<'EOF'
import json, os, sys
import numpy as np
d = sys.argv[1]
C, F, L, H, Hkv, V = 2048, 8192, 18, 16, 8, 256
D = C // H
cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": C,
       "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H,
       "num_key_value_heads": Hkv, "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
       "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
shapes = [("model.embed_tokens.weight", (V, C))]
for i in range(L):
    p = f"model.layers.{i}."
    shapes += [(p + "input_layernorm.weight", (C,)), (p + "self_attn.q_proj.weight", (H * D, C)),
               (p + "self_attn.k_proj.weight", (Hkv * D, C)),
               (p + "self_attn.v_proj.weight", (Hkv * D, C)),
               (p + "self_attn.o_proj.weight", (C, H * D)),
               (p + "post_attention_layernorm.weight", (C,)), (p + "mlp.gate_proj.weight", (F, C)),
               (p + "mlp.up_proj.weight", (F, C)), (p + "mlp.down_proj.weight", (C, F))]
shapes += [("model.norm.weight", (C,)), ("lm_head.weight", (V, C))]
rng = np.random.default_rng(0)
shards, cur, size = [], [], 0
for name, shape in shapes:
    n = int(np.prod(shape)) * 2
    if cur and size + n > 1 << 30:
        shards.append(cur)
        cur, size = [], 0
    cur.append((name, shape))
    size += n
shards.append(cur)
weight_map = {}
for k, shard in enumerate(shards):
    fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
    header, offset = {}, 0
    for name, shape in shard:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
        weight_map[name] = fname
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(d, fname), "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for name, shape in shard:
            x = (rng.standard_normal(int(np.prod(shape)), dtype=np.float32) * 0.02)
            f.write((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())
json.dump({"metadata": {}, "weight_map": weight_map},
          open(os.path.join(d, "model.safetensors.index.json"), "w"))
params = sum(int(np.prod(s)) for _, s in shapes)
print(f"model: {params / 1e9:.3f}B parameters in {len(shards)} bf16 shards, "
      f"{params * 2 / 2**30:.2f} GiB on disk, {params * 4 / 2**30:.2f} GiB in fp32")
open(os.path.join(d, "params"), "w").write(str(params))
open(os.path.join(d, "data.txt"), "w").write("In the beginning God created the heaven. " * 50)
EOF
cat "$dir"/*.safetensors > /dev/null  # warm the page cache for both
start=$(date +%s.%N)
cat "$dir"/*.safetensors > /dev/null
cat_s=$(echo "$(date +%s.%N) - $start" | bc)
/usr/bin/time -f "%e %M" -o "$dir/time" "$build/memo" eval --checkpoint "$dir" \
  --data "$dir/data.txt" --split all --seq 8 --batches 1 > /dev/null
read -r memo_s peak_kib < "$dir/time"
params=$(cat "$dir/params")
/usr/bin/python3 - "$memo_s" "$peak_kib" "$cat_s" "$params" <<'EOF'
import sys
memo_s, peak_kib, cat_s, params = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
fp32 = params * 4 / 2**30
peak = peak_kib / 2**20
print(f"memo eval --checkpoint (load + convert + 8 tokens): {memo_s:.2f} s; "
      f"reading the shards (cat, page cache): {cat_s:.2f} s; ratio {memo_s / cat_s:.1f}x")
print(f"peak resident memory: {peak:.2f} GiB; the model in fp32: {fp32:.2f} GiB; "
      f"ratio {peak / fp32:.2f}")
EOF
