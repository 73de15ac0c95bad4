#!/usr/bin/python3
"""PyTorch baseline for memo's training throughput: one LLaMA train step (forward, backward,
AdamW) in float32 on the CPU, written the way a PyTorch 1.13 user would (nn.Module, autograd);
with --autocast bf16 the forward and loss run under torch.autocast("cpu", torch.bfloat16), the
mixed precision such a user picks on a CPU with bf16 (oneDNN's AMX or AVX512-BF16 products).

Not an oracle (scripts/torch_reference.py is); the module names follow Hugging Face so the
self-test can load the same weights into both. Prints tokens/s, seconds/step and peak RSS.
"""

import argparse
import json
import math
import os
import sys
import time


def _flag_from_argv(argv, flag, default):
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return default


# Note [Two thread pools]: Debian's torch calls the pthread OpenBLAS for GEMMs, whose pool is
# separate from torch's OpenMP pool, and torch.set_num_threads bounds only OpenMP. Both at T
# threads on T cores oversubscribe: measured 5x slower per step (C=256, S=1024, 2 cores). So the
# pools are set through the environment before torch loads: OpenMP --threads, OpenBLAS
# --blas-threads (default 1), and both are printed.
kDefaultThreads = "2"
kDefaultBlasThreads = "1"
if __name__ == "__main__":
    os.environ["OMP_NUM_THREADS"] = _flag_from_argv(sys.argv, "--threads", kDefaultThreads)
    os.environ["OPENBLAS_NUM_THREADS"] = _flag_from_argv(sys.argv, "--blas-threads",
                                                         kDefaultBlasThreads)

import resource  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# torch 1.13 has no public F.scaled_dot_product_attention (it arrived in 2.0; 1.13 only has the
# private F._scaled_dot_product_attention), so a 1.13 user writes the softmax attention below.
kHasSdpa = hasattr(F, "scaled_dot_product_attention")
kPageBytes = os.sysconf("SC_PAGE_SIZE")


def current_rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * kPageBytes


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    def __init__(self, C, H, Hkv):
        super().__init__()
        self.H, self.Hkv, self.D = H, Hkv, C // H
        self.q_proj = nn.Linear(C, H * self.D, bias=False)
        self.k_proj = nn.Linear(C, Hkv * self.D, bias=False)
        self.v_proj = nn.Linear(C, Hkv * self.D, bias=False)
        self.o_proj = nn.Linear(H * self.D, C, bias=False)

    def forward(self, x, cos, sin, causal_mask):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.H, self.D).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.Hkv, self.D).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.Hkv, self.D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.Hkv != self.H:
            k = k.repeat_interleave(self.H // self.Hkv, dim=1)
            v = v.repeat_interleave(self.H // self.Hkv, dim=1)
        if kHasSdpa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.D))
            scores = scores.masked_fill(causal_mask[:S, :S], float("-inf"))
            out = torch.softmax(scores, dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(B, S, self.H * self.D))


class MLP(nn.Module):
    def __init__(self, C, F_):
        super().__init__()
        self.gate_proj = nn.Linear(C, F_, bias=False)
        self.up_proj = nn.Linear(C, F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, C, F_, H, Hkv, eps):
        super().__init__()
        self.input_layernorm = RMSNorm(C, eps)
        self.self_attn = Attention(C, H, Hkv)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.mlp = MLP(C, F_)

    def forward(self, x, cos, sin, causal_mask):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, causal_mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Body(nn.Module):
    def __init__(self, C, F_, L, H, Hkv, V, eps):
        super().__init__()
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(DecoderLayer(C, F_, H, Hkv, eps) for _ in range(L))
        self.norm = RMSNorm(C, eps)


class Llama(nn.Module):
    """state_dict keys are the Hugging Face names (model.layers.0.self_attn.q_proj.weight, ...)."""

    def __init__(self, C, F_, L, H, Hkv, V, max_seq, eps=1e-5, theta=10000.0, tied=False):
        super().__init__()
        self.model = Body(C, F_, L, H, Hkv, V, eps)
        self.tied = tied
        if not tied:
            self.lm_head = nn.Linear(C, V, bias=False)
        D = C // H
        inv_freq = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D)
        freqs = torch.arange(max_seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("rope_cos", emb.cos().float(), persistent=False)  # [max_seq, D]
        self.register_buffer("rope_sin", emb.sin().float(), persistent=False)
        mask = torch.triu(torch.ones(max_seq, max_seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)  # True above the diagonal

    def forward(self, inputs, targets):
        S = inputs.shape[1]
        cos, sin = self.rope_cos[:S], self.rope_sin[:S]
        x = self.model.embed_tokens(inputs)
        for layer in self.model.layers:
            x = layer(x, cos, sin, self.causal_mask)
        x = self.model.norm(x)
        logits = F.linear(x, self.model.embed_tokens.weight) if self.tied else self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def init_weights(model, std, seed):
    """Hugging Face init: normal(0, std) for linears and the embedding, ones for the norms."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in [("hidden", 256), ("intermediate", 688), ("layers", 5), ("heads", 4),
                          ("kv-heads", 4), ("vocab", 256), ("seq", 1024), ("batch", 1),
                          ("steps", 5)]:
        ap.add_argument("--" + flag, type=int, default=default)
    ap.add_argument("--threads", type=int, default=int(kDefaultThreads),
                    help="torch (OpenMP) threads; see Note [Two thread pools]")
    ap.add_argument("--blas-threads", type=int, default=int(kDefaultBlasThreads),
                    help="OpenBLAS threads (set before torch loads); see Note [Two thread pools]")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: the forward and loss under torch.autocast on the CPU")
    args = ap.parse_args(argv)
    if args.hidden % args.heads or args.heads % args.kv_heads or args.steps < 1:
        ap.error(f"need heads | hidden, kv-heads | heads, steps >= 1; got hidden {args.hidden} "
                 f"heads {args.heads} kv-heads {args.kv_heads} steps {args.steps}")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rss_after_import = current_rss_bytes()
    model = Llama(args.hidden, args.intermediate, args.layers, args.heads, args.kv_heads,
                  args.vocab, args.seq)
    init_weights(model, 0.02, seed=0)
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.1)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        return loss.item()

    rss_baseline = current_rss_bytes()  # model, data and buffers built; no grads, no Adam state
    step()  # warm-up: allocates gradients and Adam moments, warms the allocator
    seconds, losses = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step())
        seconds.append(time.perf_counter() - t0)
    peak = peak_rss_bytes()
    tokens_per_step = args.batch * args.seq
    mean_s = sum(seconds) / len(seconds)
    result = {
        "bench": "torch_train_step", "torch": torch.__version__, "dtype": "float32" if args.autocast == "none" else "bf16 autocast",
        "attention": "F.scaled_dot_product_attention" if kHasSdpa else
                     "plain softmax (no public F.scaled_dot_product_attention in this torch)",
        "optimizer": "torch.optim.AdamW (default implementation)",
        "hidden": args.hidden, "intermediate": args.intermediate, "layers": args.layers,
        "heads": args.heads, "kv_heads": args.kv_heads, "vocab": args.vocab, "seq": args.seq,
        "batch": args.batch, "threads": args.threads, "params": n_params,
        "blas_threads_env": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
        "warmup_steps": 1, "timed_steps": args.steps,
        "tokens_per_s": tokens_per_step / mean_s, "seconds_per_step": mean_s,
        "seconds_per_step_min": min(seconds),
        "seconds_per_step_median": sorted(seconds)[len(seconds) // 2],
        "seconds_per_step_all": seconds,
        "peak_rss_bytes": peak, "rss_after_import_bytes": rss_after_import,
        "rss_baseline_bytes": rss_baseline, "peak_rss_increase_bytes": peak - rss_baseline,
        "loss_first": losses[0], "loss_last": losses[-1],
    }
    if args.json:
        print(json.dumps(result))
    else:
        mib = 1024 ** 2
        print(f"torch {result['torch']} {result['dtype']}, attention: {result['attention']}")
        print(f"C={args.hidden} F={args.intermediate} L={args.layers} H={args.heads} "
              f"Hkv={args.kv_heads} V={args.vocab} S={args.seq} B={args.batch} "
              f"params={n_params} threads={args.threads} "
              f"OPENBLAS_NUM_THREADS={result['blas_threads_env']} steps={args.steps} (+1 warm-up)")
        print(f"tokens/s {result['tokens_per_s']:.1f}  s/step {mean_s:.4f} (min {min(seconds):.4f}, median "
              f"{result['seconds_per_step_median']:.4f})")
        print(f"peak RSS {peak / mib:.1f} MiB, baseline {rss_baseline / mib:.1f} MiB, "
              f"increase {(peak - rss_baseline) / mib:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
