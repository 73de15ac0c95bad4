#!/usr/bin/env python3
"""PyTorch beside memo on the GPU (scripts/gpu-check.sh): the same Hugging Face LLaMA config
trained for a few steps of one sequence (forward, backward, AdamW), tokens/s after a warm-up
step. Modes: fp32 with TF32 off (memo's CUDA backend computes in plain fp32); bf16 autocast
(fp32 master weights, as memo's --precision bf16); and bf16 with activation checkpointing of
every decoder layer (Hugging Face's gradient_checkpointing_enable, the usual remedy memo's
strategies are measured against). Prints one JSON object per mode.
  torch_gpu_bench.py CONFIG SEQ STEPS [MODE ...]   (default modes: fp32 bf16 bf16_ckpt)"""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def run(config_path, seq, steps, mode):
    precision = "bf16" if mode.startswith("bf16") else "fp32"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    cfg = LlamaConfig.from_json_file(config_path)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).cuda()
    if mode.endswith("_ckpt"):
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    ids = torch.randint(0, cfg.vocab_size, (1, seq + 1), device="cuda")
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(input_ids=ids[:, :-1], labels=ids[:, 1:]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    steady = times[1:] or times
    return {"framework": f"torch {torch.__version__}", "precision": precision, "mode": mode,
            "checkpointing": mode.endswith("_ckpt"), "seq": seq,
            "tokens_per_s": seq / (sum(steady) / len(steady)),
            "peak_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss)}


if __name__ == "__main__":
    config_path, seq, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    modes = sys.argv[4:] or ["fp32", "bf16", "bf16_ckpt"]
    for mode in modes:
        if mode not in ("fp32", "bf16", "bf16_ckpt"):
            sys.exit(f"torch_gpu_bench.py: mode {mode}: fp32, bf16 or bf16_ckpt")
    for mode in modes:
        try:
            print(json.dumps(run(config_path, seq, steps, mode)), flush=True)
        except torch.cuda.OutOfMemoryError as e:  # the longest runs may not fit: say so
            print(json.dumps({"mode": mode, "seq": seq, "error": "out of memory",
                              "detail": str(e)[:300]}), flush=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
