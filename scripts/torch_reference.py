#!/usr/bin/python3
"""Independent float64 PyTorch oracle for memo's LLaMA and GPT-2 models: loss, gradients, AdamW.

Written from the Hugging Face Llama and GPT-2 semantics (not from memo's code, not with
transformers); the config's model_type ("llama" or absent, "gpt2") picks the model:
plain full-matrix causal attention, autograd gradients, torch.optim.AdamW. Reads a Hugging Face
checkpoint directory (model.safetensors, or shards and model.safetensors.index.json; F32, BF16
or F16) and an llm.c token file; writes one safetensors file of F64 tensors.
Contract (memo's tests call it; the argparse options below): B windows of S+1 tokens from the
file start, the same batch every step; per step loss, grad norm, optional clip_grad_norm_, AdamW.
Output: loss [max(N,1)], grad_norm [max(N,1)], grad.<hf name> (step 0, before clipping) and
final.<hf name> (after N steps), with --logits also logits [B, S, V] (before any step), all F64. Checked by scripts/torch_reference_selftest.py.
With --write-gpt2-init SEED (GPT-2 only) the script first writes the checkpoint's
model.safetensors itself, as PyTorch would save a GPT2LMHeadModel: F32 tensors under the Hugging
Face names, Conv1D weights [in, out], plus an lm_head.weight equal to wte (tied).
`rope-frequencies CASES.json` prints the RoPE inverse frequencies and attention factor (of each
case's config and rope_scaling, from transformers' definitions) as JSON.
"""

import argparse
import json
import math
import os
import struct
import sys


def _threads_from_argv(argv):
    """The --threads value, or "1". It reaches OpenMP through the environment before torch loads;
    OpenBLAS (Debian's torch uses its pthread build, a second pool) stays at 1 thread so the two
    pools never oversubscribe the cores (see bench/torch_train_step.py, Note [Two thread pools])."""
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return "1"


if __name__ == "__main__":
    os.environ["OMP_NUM_THREADS"] = _threads_from_argv(sys.argv)
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

kTokenMagic = 20240520  # llm.c token file header: magic, version, token count, then zeros
kTokenVersion = 1
kTokenHeaderInts = 256
kDtype = torch.float64  # the oracle must be sharper than the fp32 code it judges


class ReferenceError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# Inputs


def load_gpt2_config(raw, path):
    """Returns the GPT2Config fields memo uses, checked; D = C / H, F = n_inner or 4C."""
    missing = [k for k in ("n_embd", "n_layer", "n_head", "vocab_size") if k not in raw]
    if missing:
        raise ReferenceError(f"{path}: missing fields {missing}")
    C = int(raw["n_embd"])
    cfg = {
        "arch": "gpt2",
        "C": C,
        "F": int(raw.get("n_inner") or 4 * C),
        "L": int(raw["n_layer"]),
        "H": int(raw["n_head"]),
        "V": int(raw["vocab_size"]),
        "eps": float(raw.get("layer_norm_epsilon", 1e-5)),
        "max_pos": int(raw.get("n_positions", 1024)),
        "pos": raw.get("memo_position_embedding_type") or "learned",
        "theta": float(raw.get("rope_theta", 10000.0)),
        "tied": True,
    }
    cfg["Hkv"] = cfg["H"]
    if C % cfg["H"] != 0:
        raise ReferenceError(f"{path}: n_embd {C} is not a multiple of n_head {cfg['H']}")
    cfg["D"] = C // cfg["H"]
    if raw.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ReferenceError(f"{path}: activation_function {raw['activation_function']} is not "
                             f"the tanh GELU")
    for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if raw.get(key):
            raise ReferenceError(f"{path}: {key} is true; not supported")
    if cfg["pos"] not in ("learned", "rope"):
        raise ReferenceError(f"{path}: memo_position_embedding_type {cfg['pos']} is not "
                             f"learned or rope")
    if cfg["pos"] == "rope" and cfg["D"] % 2 != 0:
        raise ReferenceError(f"{path}: head_dim {cfg['D']} is odd; rotary needs it even")
    return cfg


def load_config(checkpoint_dir):
    """Returns the LlamaConfig (or GPT2Config) fields memo uses, checked; D = C / H."""
    path = os.path.join(checkpoint_dir, "config.json")
    with open(path) as f:
        return config_fields(json.load(f), path)


def config_fields(raw, path):
    """load_config's work on the parsed config.json `raw` (`path` names it in errors)."""
    if raw.get("model_type") == "gpt2":
        return load_gpt2_config(raw, path)
    required = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "vocab_size", "rms_norm_eps"]
    missing = [k for k in required if k not in raw]
    if missing:
        raise ReferenceError(f"{path}: missing fields {missing}")
    model_type = raw.get("model_type") or "llama"
    if model_type not in ("llama", "qwen2", "qwen3", "mistral"):
        raise ReferenceError(f"{path}: model_type {raw['model_type']} is not known to the reference")
    # LlamaConfig's attention_bias puts biases on q, k, v and o, its mlp_bias on gate, up and
    # down; Qwen3Config's attention_bias is the same four; Qwen2's q/k/v biases are implied
    attention_bias = bool(raw.get("attention_bias")) and model_type in ("llama", "qwen3")
    for key in ("attention_bias", "mlp_bias"):
        if raw.get(key) and not (key == "attention_bias" and attention_bias
                                 or key == "mlp_bias" and model_type == "llama"):
            raise ReferenceError(f"{path}: {key} is not a {model_type} field")
    cfg = {
        "arch": "llama",
        "qkv_bias": model_type == "qwen2" or attention_bias,
        "o_bias": attention_bias,
        "mlp_bias": bool(raw.get("mlp_bias")),
        "qk_norm": model_type == "qwen3",  # Qwen3: RMSNorm over each head of q and k
        "C": int(raw["hidden_size"]),
        "F": int(raw["intermediate_size"]),
        "L": int(raw["num_hidden_layers"]),
        "H": int(raw["num_attention_heads"]),
        "Hkv": int(raw.get("num_key_value_heads") or raw["num_attention_heads"]),
        "V": int(raw["vocab_size"]),
        "eps": float(raw["rms_norm_eps"]),
        "theta": float(raw.get("rope_theta", 10000.0)),
        "max_pos": int(raw.get("max_position_embeddings", 2048)),
        "tied": bool(raw.get("tie_word_embeddings", False)),
    }
    cfg["windows"] = layer_windows(raw, model_type, cfg["L"], path)
    if cfg["H"] % cfg["Hkv"] != 0:
        raise ReferenceError(f"{path}: num_key_value_heads {cfg['Hkv']} does not divide "
                             f"num_attention_heads {cfg['H']}")
    # head_dim: given, or Qwen3Config's default 128, or hidden_size / num_attention_heads
    head_dim = raw.get("head_dim", 128 if model_type == "qwen3" else None)
    if head_dim is None:
        if cfg["C"] % cfg["H"] != 0:
            raise ReferenceError(f"{path}: hidden_size {cfg['C']} is not a multiple of "
                                 f"num_attention_heads {cfg['H']}")
        head_dim = cfg["C"] // cfg["H"]
    cfg["D"] = int(head_dim)
    if cfg["D"] % 2 != 0:
        raise ReferenceError(f"{path}: head_dim {cfg['D']} is odd; rotary needs it even")
    cfg["rope"] = dict(raw.get("rope_scaling") or {"rope_type": "default"})
    cfg["rope"].setdefault("rope_type", cfg["rope"].get("type"))
    if "original_max_position_embeddings" in raw:  # Phi-3's longrope configs put it here
        cfg["rope"].setdefault("original_max_position_embeddings",
                               raw["original_max_position_embeddings"])
    return cfg


def layer_windows(raw, model_type, L, path):
    """Each layer's sliding window (None: the whole causal context). Mistral windows every layer
    (MistralConfig's default 4096; null: none). Qwen2 and Qwen3 window only when
    use_sliding_window is set (sliding_window, default 4096), on the layers whose layer_types entry
    is "sliding_attention"; without layer_types, on the layers from max_window_layers (default
    28) on: Qwen2Config's reading in transformers 5."""
    if model_type == "mistral":
        return [raw.get("sliding_window", 4096)] * L
    if model_type not in ("qwen2", "qwen3"):
        return [None] * L
    window = raw.get("sliding_window", 4096) if raw.get("use_sliding_window") else None
    types = raw.get("layer_types")
    if types is None:
        first = raw.get("max_window_layers", 28)
        types = ["sliding_attention" if window is not None and i >= first else "full_attention"
                 for i in range(L)]
    if len(types) != L or any(t not in ("full_attention", "sliding_attention") for t in types):
        raise ReferenceError(f"{path}: layer_types {types} is not one of two types a layer")
    if window is None and "sliding_attention" in types:
        raise ReferenceError(f"{path}: a sliding_attention layer without a window")
    return [window if t == "sliding_attention" else None for t in types]


def gpt2_param_shapes(cfg):
    """Hugging Face GPT-2 names -> shapes, in a fixed order. Conv1D: y = x W + b, W: [in, out]."""
    C, F_, V = cfg["C"], cfg["F"], cfg["V"]
    shapes = {"transformer.wte.weight": [V, C]}
    if cfg["pos"] == "learned":
        shapes["transformer.wpe.weight"] = [cfg["max_pos"], C]
    for i in range(cfg["L"]):
        p = f"transformer.h.{i}."
        shapes[p + "ln_1.weight"] = [C]
        shapes[p + "ln_1.bias"] = [C]
        shapes[p + "attn.c_attn.weight"] = [C, 3 * C]
        shapes[p + "attn.c_attn.bias"] = [3 * C]
        shapes[p + "attn.c_proj.weight"] = [C, C]
        shapes[p + "attn.c_proj.bias"] = [C]
        shapes[p + "ln_2.weight"] = [C]
        shapes[p + "ln_2.bias"] = [C]
        shapes[p + "mlp.c_fc.weight"] = [C, F_]
        shapes[p + "mlp.c_fc.bias"] = [F_]
        shapes[p + "mlp.c_proj.weight"] = [F_, C]
        shapes[p + "mlp.c_proj.bias"] = [C]
    shapes["transformer.ln_f.weight"] = [C]
    shapes["transformer.ln_f.bias"] = [C]
    return shapes


def embedding_name(cfg):
    return "transformer.wte.weight" if cfg["arch"] == "gpt2" else "model.embed_tokens.weight"


def write_gpt2_init(checkpoint_dir, cfg, seed):
    """Random float32 weights from a torch generator (std 0.2 matrices, norm weights near 1,
    nonzero biases, so that every path carries signal), written as PyTorch saves a tied
    GPT2LMHeadModel: F32 tensors, Hugging Face names, lm_head.weight a copy of wte."""
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in gpt2_param_shapes(cfg).items():
        if name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=gen, dtype=torch.float32)  # nonzero: tested
        elif len(shape) == 1:
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float32)
        else:
            t = 0.2 * torch.randn(shape, generator=gen, dtype=torch.float32)
        tensors[name] = t.numpy()
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].copy()
    safetensors_io.write(os.path.join(checkpoint_dir, "model.safetensors"), tensors,
                         {"format": "pt"})


def param_shapes(cfg):
    """Hugging Face Llama parameter names -> shapes, in a fixed order. y = x W^T, W: [out, in]."""
    if cfg["arch"] == "gpt2":
        return gpt2_param_shapes(cfg)
    C, F_, H, Hkv, D, V = cfg["C"], cfg["F"], cfg["H"], cfg["Hkv"], cfg["D"], cfg["V"]
    shapes = {"model.embed_tokens.weight": [V, C]}
    for i in range(cfg["L"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = [C]
        shapes[p + "self_attn.q_proj.weight"] = [H * D, C]
        shapes[p + "self_attn.k_proj.weight"] = [Hkv * D, C]
        shapes[p + "self_attn.v_proj.weight"] = [Hkv * D, C]
        if cfg["qkv_bias"]:
            shapes[p + "self_attn.q_proj.bias"] = [H * D]
            shapes[p + "self_attn.k_proj.bias"] = [Hkv * D]
            shapes[p + "self_attn.v_proj.bias"] = [Hkv * D]
        shapes[p + "self_attn.o_proj.weight"] = [C, H * D]
        if cfg["o_bias"]:
            shapes[p + "self_attn.o_proj.bias"] = [C]
        if cfg["qk_norm"]:
            shapes[p + "self_attn.q_norm.weight"] = [D]
            shapes[p + "self_attn.k_norm.weight"] = [D]
        shapes[p + "post_attention_layernorm.weight"] = [C]
        for proj, shape in (("gate", [F_, C]), ("up", [F_, C]), ("down", [C, F_])):
            shapes[p + f"mlp.{proj}_proj.weight"] = shape
            if cfg["mlp_bias"]:
                shapes[p + f"mlp.{proj}_proj.bias"] = shape[:1]
    shapes["model.norm.weight"] = [C]
    if not cfg["tied"]:
        shapes["lm_head.weight"] = [V, C]
    return shapes


def read_model_tensors(checkpoint_dir):
    """(path, dict name -> numpy array) of model.safetensors, or else of the shards that
    model.safetensors.index.json lists: each tensor in the shard its weight_map names, each shard
    holding only the tensors mapped to it, and metadata.total_size equal to their data bytes."""
    path = os.path.join(checkpoint_dir, "model.safetensors")
    index_path = os.path.join(checkpoint_dir, "model.safetensors.index.json")
    if os.path.exists(path) or not os.path.exists(index_path):
        return path, safetensors_io.read(path)[0]
    with open(index_path, encoding="utf-8") as f:
        index = json.load(f)
    weight_map = index["weight_map"]
    tensors, data_bytes = {}, 0
    for shard in sorted(set(weight_map.values())):
        shard_path = os.path.join(checkpoint_dir, shard)
        in_shard, _ = safetensors_io.read(shard_path)
        with open(shard_path, "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        data_bytes += sum(v["data_offsets"][1] - v["data_offsets"][0]
                          for k, v in header.items() if k != "__metadata__")
        expected = {n for n, s in weight_map.items() if s == shard}
        if set(in_shard) != expected:
            raise ReferenceError(f"{shard_path} holds {sorted(in_shard)}, {index_path} maps "
                                 f"{sorted(expected)} to it")
        tensors.update(in_shard)
    total = index.get("metadata", {}).get("total_size")
    if total != data_bytes:
        raise ReferenceError(f"{index_path}: metadata.total_size {total}, the shards hold "
                             f"{data_bytes} data bytes")
    return index_path, tensors


def load_params(checkpoint_dir, cfg):
    """Reads the model tensors (read_model_tensors) into float64 leaf tensors; names and shapes
    must match exactly.

    When tied, a stored lm_head.weight is accepted only if it equals embed_tokens (some writers
    store both) and is then dropped: the head uses embed_tokens.
    """
    path, tensors = read_model_tensors(checkpoint_dir)
    shapes = param_shapes(cfg)
    if cfg["tied"] and "lm_head.weight" in tensors:
        if not np.array_equal(tensors["lm_head.weight"], tensors.get(embedding_name(cfg))):
            raise ReferenceError(f"{path}: tie_word_embeddings is true but lm_head.weight differs "
                                 f"from {embedding_name(cfg)}")
        del tensors["lm_head.weight"]
    missing = [n for n in shapes if n not in tensors]
    unexpected = [n for n in tensors if n not in shapes]
    if missing or unexpected:
        raise ReferenceError(f"{path}: missing tensors {missing}, unexpected tensors {unexpected}")
    params = {}
    for name, shape in shapes.items():
        if list(tensors[name].shape) != shape:
            raise ReferenceError(f"{path}: tensor {name} has shape {list(tensors[name].shape)}, "
                                 f"expected {shape}")
        params[name] = torch.tensor(tensors[name].astype(np.float64), dtype=kDtype,
                                    requires_grad=True)
    return params


def read_tokens(path):
    """llm.c token file: 256 little-endian int32 header (magic, version, n), then n uint16."""
    with open(path, "rb") as f:
        blob = f.read()
    header_bytes = kTokenHeaderInts * 4
    if len(blob) < header_bytes:
        raise ReferenceError(f"{path}: {len(blob)} bytes, shorter than the {header_bytes}-byte header")
    header = np.frombuffer(blob[:header_bytes], dtype="<i4")
    if header[0] != kTokenMagic or header[1] != kTokenVersion:
        raise ReferenceError(f"{path}: magic {header[0]} version {header[1]}, expected "
                             f"{kTokenMagic} version {kTokenVersion}")
    n = int(header[2])
    if len(blob) != header_bytes + 2 * n:
        raise ReferenceError(f"{path}: header says {n} tokens ({2 * n} bytes) but the file holds "
                             f"{len(blob) - header_bytes} bytes after the header")
    return np.frombuffer(blob[header_bytes:], dtype="<u2").astype(np.int64)


def make_batch(tokens, S, B, V, path):
    """Window b = tokens[b*S : b*S + S + 1]; inputs its first S, targets its last S. [B, S] int64."""
    need = B * S + 1
    if len(tokens) < need:
        raise ReferenceError(f"{path}: {len(tokens)} tokens, the batch B={B} S={S} needs {need}")
    windows = np.stack([tokens[b * S:b * S + S + 1] for b in range(B)])
    bad = np.argwhere(windows >= V)
    if len(bad):
        b, t = bad[0]
        raise ReferenceError(f"token id {windows[b, t]} at position {b * S + t} of {path} is "
                             f"outside the vocabulary [0, {V})")
    return torch.from_numpy(windows[:, :S].copy()), torch.from_numpy(windows[:, 1:].copy())


# ---------------------------------------------------------------------------------------------
# Model (Hugging Face Llama semantics, written out plainly)


def rmsnorm(x, w, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last dim."""
    return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def rope_scaled_frequencies(rope, D, theta, max_pos, S):
    """(inv_freq [D/2], attention factor) of a `rope_scaling` dict for a sequence of S tokens,
    from transformers' published definitions (modeling_rope_utils), in float64."""
    kind = rope.get("rope_type") or "default"
    base_exponent = torch.arange(0, D, 2, dtype=kDtype) / D   # 2i/D
    inv = 1.0 / theta ** base_exponent
    orig = rope.get("original_max_position_embeddings") or max_pos
    if kind == "default":
        return inv, 1.0
    if kind == "linear":
        return inv / rope["factor"], 1.0
    if kind == "dynamic":
        f, seq = rope["factor"], max(S, max_pos)
        new_base = theta * ((f * seq / max_pos) - (f - 1)) ** (D / (D - 2))
        return 1.0 / new_base ** base_exponent, 1.0
    if kind == "yarn":
        f = rope["factor"]

        def mscale(scale, k=1.0):
            return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0

        def turning_pair(rotations):  # the pair whose wavelength fits `rotations` turns in orig
            return D * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

        low, high = turning_pair(rope.get("beta_fast", 32)), turning_pair(rope.get("beta_slow", 1))
        if rope.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, D - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(D // 2, dtype=kDtype) - low) / (high - low)).clamp(0, 1)
        extrapolated = 1 - ramp      # share of the original frequency
        scaled = inv * extrapolated + (inv / f) * (1 - extrapolated)
        if rope.get("attention_factor") is not None:
            factor = rope["attention_factor"]
        elif rope.get("mscale") and rope.get("mscale_all_dim"):
            factor = mscale(f, rope["mscale"]) / mscale(f, rope["mscale_all_dim"])
        else:
            factor = mscale(f)
        return scaled, factor
    if kind == "longrope":
        f = rope.get("factor", max_pos / orig)
        ext = torch.tensor(rope["long_factor"] if S > orig else rope["short_factor"], dtype=kDtype)
        factor = rope.get("attention_factor")
        if factor is None:
            factor = 1.0 if f <= 1 else math.sqrt(1 + math.log(f) / math.log(orig))
        return 1.0 / (ext * theta ** base_exponent), factor
    if kind == "llama3":
        f, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        orig = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        out = torch.where(wavelen > orig / lo, inv / f, inv)
        smooth = (orig / wavelen - lo) / (hi - lo)
        medium = (wavelen >= orig / hi) & (wavelen <= orig / lo)
        return torch.where(medium, (1 - smooth) * inv / f + smooth * inv, out), 1.0
    raise ReferenceError(f"rope_type {kind} is not known to the reference")


def rope_cos_sin(S, D, theta, rope=None, max_pos=None):
    """cos, sin: [S, D]. angle(p, i) = p * inv_freq_i (theta^(-2i/D) for plain RoPE), repeated to
    width D as cat(freqs, freqs) (Hugging Face layout, not interleaved pairs), both times the
    attention factor of the scaling."""
    inv_freq, factor = rope_scaled_frequencies(rope or {"rope_type": "default"}, D, theta,
                                               max_pos or S, S)
    freqs = torch.arange(S, dtype=kDtype)[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos() * factor, emb.sin() * factor


def rotate_half(x):
    """cat(-x[D/2:], x[:D/2]) over the last dim."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x, cos, sin):
    """x: [B, heads, S, D]; cos, sin: [S, D]. x*cos + rotate_half(x)*sin."""
    return x * cos + rotate_half(x) * sin


def attention(x, wq, wk, wv, wo, cfg, cos, sin, biases=(0.0, 0.0, 0.0, 0.0), qk_norm=None,
              window=None):
    """Causal grouped-query attention, full softmax matrix. x: [B, S, C] -> [B, S, C].
    `biases` (Qwen2's q, k, v; Llama's attention_bias: q, k, v, o) are added to the products,
    q's, k's and v's before the rotation; `qk_norm` (Qwen3: the q_norm and k_norm weights [D])
    RMSNorms each head of q and k before the rotation; `window` (None: none) is the layer's sliding
    window."""
    B, S, _ = x.shape
    H, Hkv, D = cfg["H"], cfg["Hkv"], cfg["D"]
    bq, bk, bv, bo = biases
    q = (x @ wq.T + bq).view(B, S, H, D)
    k = (x @ wk.T + bk).view(B, S, Hkv, D)
    if qk_norm is not None:
        q, k = rmsnorm(q, qk_norm[0], cfg["eps"]), rmsnorm(k, qk_norm[1], cfg["eps"])
    q, k = q.transpose(1, 2), k.transpose(1, 2)              # [B, H, S, D], [B, Hkv, S, D]
    v = (x @ wv.T + bv).view(B, S, Hkv, D).transpose(1, 2)  # [B, Hkv, S, D]
    q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    group = H // Hkv  # query head h reads kv head h // group
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)  # [B, H, S, S]
    query, key = torch.arange(S)[:, None], torch.arange(S)[None, :]
    hidden = key > query  # causal
    if window:  # the layer's sliding window: a key is seen by the `window` queries from it on
        hidden = hidden | (query - key >= window)
    scores = scores.masked_fill(hidden, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v            # [B, H, S, D]
    return out.transpose(1, 2).reshape(B, S, H * D) @ wo.T + bo


def gelu_tanh(x):
    """GPT-2's GELU ("gelu_new"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_attention(x, w_attn, b_attn, w_proj, b_proj, cfg, cos, sin):
    """Causal multi-head attention with GPT-2's fused c_attn (Conv1D). x: [B, S, C] -> [B, S, C]."""
    B, S, C = x.shape
    H, D = cfg["H"], cfg["D"]
    q, k, v = (x @ w_attn + b_attn).split(C, dim=-1)
    q, k, v = (t.view(B, S, H, D).transpose(1, 2) for t in (q, k, v))  # [B, H, S, D]
    if cos is not None:
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(D)  # [B, H, S, S]
    future = torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(B, S, C) @ w_proj + b_proj


def gpt2_forward_logits(params, cfg, inputs):
    """GPT-2 (pre-LayerNorm blocks, tied head): logits [B, S, V]."""
    S, C, eps = inputs.shape[1], cfg["C"], cfg["eps"]
    cos = sin = None
    x = params["transformer.wte.weight"][inputs]  # [B, S, C]
    if cfg["pos"] == "learned":
        x = x + params["transformer.wpe.weight"][:S]
    else:
        cos, sin = rope_cos_sin(S, cfg["D"], cfg["theta"])
    for i in range(cfg["L"]):
        p = f"transformer.h.{i}."
        a = F.layer_norm(x, (C,), params[p + "ln_1.weight"], params[p + "ln_1.bias"], eps)
        x = x + gpt2_attention(a, params[p + "attn.c_attn.weight"], params[p + "attn.c_attn.bias"],
                               params[p + "attn.c_proj.weight"], params[p + "attn.c_proj.bias"],
                               cfg, cos, sin)
        m = F.layer_norm(x, (C,), params[p + "ln_2.weight"], params[p + "ln_2.bias"], eps)
        fc = gelu_tanh(m @ params[p + "mlp.c_fc.weight"] + params[p + "mlp.c_fc.bias"])
        x = x + fc @ params[p + "mlp.c_proj.weight"] + params[p + "mlp.c_proj.bias"]
    xf = F.layer_norm(x, (C,), params["transformer.ln_f.weight"],
                      params["transformer.ln_f.bias"], eps)
    return xf @ params["transformer.wte.weight"].T  # [B, S, V]


def forward_logits(params, cfg, inputs):
    """Logits [B, S, V] of the LLaMA or GPT-2 model."""
    if cfg["arch"] == "gpt2":
        return gpt2_forward_logits(params, cfg, inputs)
    S = inputs.shape[1]
    cos, sin = rope_cos_sin(S, cfg["D"], cfg["theta"], cfg["rope"], cfg["max_pos"])
    eps = cfg["eps"]
    x = params["model.embed_tokens.weight"][inputs]  # [B, S, C]
    for i in range(cfg["L"]):
        p = f"model.layers.{i}."
        a = rmsnorm(x, params[p + "input_layernorm.weight"], eps)
        def bias(name, on):
            return params[p + name + ".bias"] if on else 0.0
        biases = tuple(bias(f"self_attn.{n}_proj", cfg["qkv_bias"]) for n in "qkv") + \
            (bias("self_attn.o_proj", cfg["o_bias"]),)
        qk_norm = (params[p + "self_attn.q_norm.weight"], params[p + "self_attn.k_norm.weight"]) \
            if cfg["qk_norm"] else None
        h = x + attention(a, params[p + "self_attn.q_proj.weight"],
                          params[p + "self_attn.k_proj.weight"],
                          params[p + "self_attn.v_proj.weight"],
                          params[p + "self_attn.o_proj.weight"], cfg, cos, sin, biases, qk_norm,
                          cfg["windows"][i])
        m = rmsnorm(h, params[p + "post_attention_layernorm.weight"], eps)
        gate = m @ params[p + "mlp.gate_proj.weight"].T + bias("mlp.gate_proj", cfg["mlp_bias"])
        up = m @ params[p + "mlp.up_proj.weight"].T + bias("mlp.up_proj", cfg["mlp_bias"])
        x = h + (F.silu(gate) * up) @ params[p + "mlp.down_proj.weight"].T + \
            bias("mlp.down_proj", cfg["mlp_bias"])
    head = params["model.embed_tokens.weight"] if cfg["tied"] else params["lm_head.weight"]
    return rmsnorm(x, params["model.norm.weight"], eps) @ head.T  # [B, S, V]


def forward_loss(params, cfg, inputs, targets):
    """Mean cross-entropy over all B*S tokens (a float64 scalar)."""
    logits = forward_logits(params, cfg, inputs)
    return F.cross_entropy(logits.reshape(-1, cfg["V"]), targets.reshape(-1))


# ---------------------------------------------------------------------------------------------
# Training


def train(params, cfg, inputs, targets, steps, lr, betas, eps, weight_decay, clip):
    """Returns (losses [max(N,1)], grad_norms [max(N,1)], step-0 gradients before clipping).

    AdamW (decoupled decay, constant lr) covers every parameter, norms and embeddings included.
    """
    names = list(params)
    tensors = [params[n] for n in names]
    optimizer = torch.optim.AdamW(tensors, lr=lr, betas=betas, eps=eps,
                                  weight_decay=weight_decay) if steps > 0 else None
    losses, grad_norms, grads0 = [], [], None
    for step in range(max(steps, 1)):
        for t in tensors:
            t.grad = None
        loss = forward_loss(params, cfg, inputs, targets)
        loss.backward()
        grad_norm = torch.sqrt(sum(t.grad.pow(2).sum() for t in tensors))
        losses.append(loss.item())
        grad_norms.append(grad_norm.item())
        if step == 0:
            grads0 = {n: params[n].grad.detach().clone() for n in names}
        if steps == 0:
            break
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(tensors, clip)
        optimizer.step()
    return losses, grad_norms, grads0


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="dir with config.json, model.safetensors or shards + index")
    ap.add_argument("--tokens", required=True, help="llm.c token file")
    ap.add_argument("--seq", type=int, required=True, help="S, tokens per window")
    ap.add_argument("--batch", type=int, required=True, help="B, windows from the file start")
    ap.add_argument("--steps", type=int, required=True, help="N AdamW steps; 0: forward+grad only")
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--beta1", type=float, required=True)
    ap.add_argument("--beta2", type=float, required=True)
    ap.add_argument("--eps", type=float, required=True, help="AdamW eps")
    ap.add_argument("--weight-decay", type=float, required=True)
    ap.add_argument("--clip", type=float, default=None, help="global grad-norm clip (optional)")
    ap.add_argument("--out", required=True, help="output .safetensors (all tensors F64)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--write-gpt2-init", type=int, default=None, metavar="SEED",
                    help="GPT-2 only: first write the checkpoint's model.safetensors from torch")
    ap.add_argument("--logits", action="store_true",
                    help="also write logits [B, S, V] of the first forward (before any step)")
    args = ap.parse_args(argv)
    for key in ("seq", "batch"):
        if getattr(args, key) < 1:
            ap.error(f"--{key} {getattr(args, key)} must be >= 1")
    if args.steps < 0:
        ap.error(f"--steps {args.steps} must be >= 0")
    if args.clip is not None and not args.clip > 0:
        ap.error(f"--clip {args.clip} must be > 0")
    return args


def run(args):
    torch.set_num_threads(args.threads)
    cfg = load_config(args.checkpoint)
    # learned positions have a row each; RoPE has no bound (dynamic scaling is run past it)
    if cfg["arch"] == "gpt2" and args.seq > cfg["max_pos"]:
        raise ReferenceError(f"--seq {args.seq} exceeds n_positions {cfg['max_pos']}")
    if args.write_gpt2_init is not None:
        if cfg["arch"] != "gpt2":
            raise ReferenceError("--write-gpt2-init needs a config with model_type gpt2")
        write_gpt2_init(args.checkpoint, cfg, args.write_gpt2_init)
    params = load_params(args.checkpoint, cfg)
    inputs, targets = make_batch(read_tokens(args.tokens), args.seq, args.batch, cfg["V"],
                                 args.tokens)
    logits = None
    if args.logits:
        with torch.no_grad():
            logits = forward_logits(params, cfg, inputs).numpy().astype(np.float64)
    losses, grad_norms, grads0 = train(params, cfg, inputs, targets, args.steps, args.lr,
                                       (args.beta1, args.beta2), args.eps, args.weight_decay,
                                       args.clip)
    out = {"loss": np.array(losses, dtype=np.float64),
           "grad_norm": np.array(grad_norms, dtype=np.float64)}
    for name, p in params.items():
        out["grad." + name] = grads0[name].numpy().astype(np.float64)
        out["final." + name] = p.detach().numpy().astype(np.float64)
    if logits is not None:
        out["logits"] = logits
    metadata = {"generator": "scripts/torch_reference.py", "torch": torch.__version__,
                "args": json.dumps({k: v for k, v in vars(args).items() if k != "threads"})}
    safetensors_io.write(args.out, out, metadata)
    return losses, grad_norms


def print_rope_frequencies(argv):
    """`rope-frequencies CASES.json`: CASES is a list of {"config": <config.json object>,
    "seq": S}; prints, as one JSON list, each case's RoPE inverse frequencies and attention
    factor for a sequence of S tokens."""
    if len(argv) != 1:
        print("usage: torch_reference.py rope-frequencies CASES.json", file=sys.stderr)
        return 2
    out = []
    try:
        with open(argv[0]) as f:
            cases = json.load(f)
        for i, case in enumerate(cases):
            cfg = config_fields(case["config"], f"{argv[0]} case {i}")
            inv, factor = rope_scaled_frequencies(cfg["rope"], cfg["D"], cfg["theta"],
                                                  cfg["max_pos"], int(case["seq"]))
            out.append({"inv_freq": inv.tolist(), "attention_factor": float(factor)})
    except (ReferenceError, OSError, ValueError, KeyError) as e:
        print(f"torch_reference: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "rope-frequencies":
        return print_rope_frequencies(argv[1:])
    args = parse_args(argv)
    try:
        losses, grad_norms = run(args)
    except (ReferenceError, safetensors_io.SafetensorsError, OSError, ValueError) as e:
        print(f"torch_reference: {e}", file=sys.stderr)
        return 1
    print(f"torch_reference: steps {args.steps} loss {losses[0]:.10f} -> {losses[-1]:.10f} "
          f"grad_norm[0] {grad_norms[0]:.6e} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
