#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention beside memo's CUDA attention (scripts/gpu-check.sh runs
both; bench/cuda/attention_bench.cc is memo's side): causal, one sequence, 32 query heads over 8
key/value heads of 64, forward and forward + backward, the best of 3 timed runs after a warm-up.
fp32 with TF32 off (what memo's CUDA attention computes in) and bf16 (FlashAttention's kernels).
FLOPs counted as memo's bench counts them (causal pairs). One JSON object a line.
    torch_gpu_attention.py [S ...]   (default: 4096 32768)"""
import json
import sys
import time

import torch
import torch.nn.functional as F

H, HKV, D = 32, 8, 64


def timed(fn):
    best = float("inf")
    for i in range(4):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if i > 0:
            best = min(best, time.perf_counter() - t0)
    return best * 1e3


def run(seq, dtype):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.rand(1, H, seq, D, device="cuda", dtype=dtype, generator=g).requires_grad_()
    k = torch.rand(1, HKV, seq, D, device="cuda", dtype=dtype, generator=g).requires_grad_()
    v = torch.rand(1, HKV, seq, D, device="cuda", dtype=dtype, generator=g).requires_grad_()
    dout = torch.rand(1, H, seq, D, device="cuda", dtype=dtype, generator=g)

    def attend():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def fwd():
        with torch.no_grad():
            attend()

    def fwd_bwd():
        attend().backward(dout)

    pairs = seq * (seq + 1) / 2
    fwd_ms, fwd_bwd_ms = timed(fwd), timed(fwd_bwd)
    return {"framework": f"torch {torch.__version__}", "impl": "sdpa",
            "precision": "fp32" if dtype == torch.float32 else "bf16", "seq": seq,
            "fwd_ms": fwd_ms, "fwd_bwd_ms": fwd_bwd_ms,
            "fwd_tflops": 4 * D * H * pairs / (fwd_ms * 1e-3) / 1e12,
            "fwd_bwd_tflops": 14 * D * H * pairs / (fwd_bwd_ms * 1e-3) / 1e12}


if __name__ == "__main__":
    for seq in [int(a) for a in sys.argv[1:]] or [4096, 32768]:
        for dtype in (torch.float32, torch.bfloat16):
            try:
                print(json.dumps(run(seq, dtype)), flush=True)
            except Exception as e:  # e.g. no fp32 kernel that fits at this length
                print(json.dumps({"impl": "sdpa", "seq": seq, "dtype": str(dtype),
                                  "error": str(e)[:300]}), flush=True)
            torch.cuda.empty_cache()
