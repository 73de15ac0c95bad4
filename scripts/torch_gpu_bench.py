#!/usr/bin/env python3
"""PyTorch beside memo on the GPU (scripts/gpu-check.sh): the same Hugging Face LLaMA config
trained for a few steps of one sequence (forward, backward, AdamW), tokens/s after a warm-up
step. fp32 with TF32 off (memo's CUDA backend computes in plain fp32), and the same with bf16
autocast for scale. Prints one JSON object per precision."""
import json
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def run(config_path, seq, steps, precision):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    cfg = LlamaConfig.from_json_file(config_path)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).cuda()
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
    return {"framework": f"torch {torch.__version__}", "precision": precision, "seq": seq,
            "tokens_per_s": seq / (sum(steady) / len(steady)),
            "peak_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss)}


if __name__ == "__main__":
    config_path, seq, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for precision in ("fp32", "bf16"):
        print(json.dumps(run(config_path, seq, steps, precision)), flush=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
