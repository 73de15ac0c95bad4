#!/usr/bin/python3
"""memo's checkpoints as Hugging Face transformers reads them (issue #24; the `transformers` stage
of scripts/gpu-check.sh, on the GPU machine, where transformers is installed; not in the test
suite, whose machines lack it).

For each architecture memo trains (Llama with llama3 rope scaling and its attention and MLP
biases, Qwen2 with YaRN, Qwen3 with q/k norms, head_dim and biases, Mistral with a sliding window
shorter than the windows, Qwen2 with that window on its top layer only, GPT-2), `memo train` runs 2 AdamW steps of a small byte-level model and
saves it; transformers loads the checkpoint folder (AutoModelForCausalLM, float64, eager
attention) and its logits over two windows of the corpus, past the original context and the
sliding window, are compared with those of scripts/torch_reference.py, the float64 PyTorch model
the test suite holds memo's own forward and checkpoints to. So transformers reads memo's names,
shapes, config fields and rope scaling as memo means them.

Usage: hf_transformers_check.py MEMO CORPUS WORKDIR [--device cpu]
One JSON line per architecture (its largest logit difference over max(|logit|, 1)); exit status
1 if any load fails or differs by more than 1e-9 (two float64 computations of the same model).
"""

import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402  (scripts/, beside this file)

SEQ, BATCH, TOL = 96, 2, 1e-9

BASE = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6}
CONFIGS = {
    "llama3_biases": dict(BASE, model_type="llama", attention_bias=True, mlp_bias=True,
                          rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                        "original_max_position_embeddings": 32}),
    "qwen2_yarn": dict(BASE, model_type="qwen2", tie_word_embeddings=True,
                       use_sliding_window=False, sliding_window=4096, max_window_layers=2,
                       rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 32}),
    "qwen3": dict(BASE, model_type="qwen3", head_dim=16, attention_bias=True,
                  tie_word_embeddings=True, use_sliding_window=False),
    "mistral_window": dict(BASE, model_type="mistral", sliding_window=40),
    "qwen2_top_layer_window": dict(BASE, model_type="qwen2", use_sliding_window=True,
                                   sliding_window=40, max_window_layers=1),
    "gpt2": {"model_type": "gpt2", "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 256,
             "vocab_size": 256, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True},
}


def write_llmc_tokens(path, ids):
    """An llm.c token file: 256 int32 of header (magic 20240520, version 1, count), uint16 ids."""
    header = [20240520, 1, len(ids)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(ids)}H", *ids))


def latest_checkpoint(out):
    with open(os.path.join(out, "latest")) as f:
        return os.path.join(out, f.read().strip())


def check(name, config, memo, corpus, work, device):
    import torch
    from transformers import AutoModelForCausalLM

    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    cfg = os.path.join(d, "config.json")
    with open(cfg, "w") as f:
        json.dump(config, f)
    subprocess.run([memo, "train", "--config", cfg, "--data", corpus, "--seq", str(SEQ),
                    "--batch", "4", "--steps", "2", "--lr", "3e-3", "--warmup", "1",
                    "--save-every", "0", "--val-batches", "0", "--device", "cpu",
                    "--precision", "fp32", "--out", os.path.join(d, "run"),
                    "--log", os.path.join(d, "run.jsonl")],
                   check=True, stdout=subprocess.DEVNULL)
    ckpt = latest_checkpoint(os.path.join(d, "run"))
    with open(corpus, "rb") as f:
        ids = list(f.read(BATCH * (SEQ + 1)))
    tokens = os.path.join(d, "tokens.bin")
    write_llmc_tokens(tokens, ids)
    ref = os.path.join(d, "ref.safetensors")
    subprocess.run([sys.executable, os.path.join(HERE, "torch_reference.py"),
                    "--checkpoint", ckpt, "--tokens", tokens, "--seq", str(SEQ),
                    "--batch", str(BATCH), "--steps", "0", "--lr", "0", "--beta1", "0.9",
                    "--beta2", "0.95", "--eps", "1e-8", "--weight-decay", "0", "--out", ref,
                    "--logits"], check=True)
    tensors, _ = safetensors_io.read(ref)
    want = torch.from_numpy(tensors["logits"]).reshape(BATCH, SEQ, -1)  # float64
    model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float64,
                                                 attn_implementation="eager").to(device).eval()
    x = torch.tensor([ids[b * (SEQ + 1):b * (SEQ + 1) + SEQ] for b in range(BATCH)],
                     device=device)
    with torch.no_grad():
        got = model(input_ids=x).logits.double().cpu()
    scale = max(want.abs().max().item(), 1.0)
    err = (got - want).abs().max().item() / scale
    return {"arch": name, "checkpoint": ckpt, "max_rel_diff": err, "ok": err <= TOL}


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.split("\n\n")[-1])
    memo, corpus, work = sys.argv[1:4]
    device = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--device" else "cpu"
    try:
        import transformers  # noqa: F401
    except ImportError:
        print(json.dumps({"skipped": "transformers is not installed"}))
        return 0
    failed = False
    for name, config in CONFIGS.items():
        try:
            r = check(name, config, memo, corpus, work, device)
        except Exception as e:  # one line each: a load that fails is the finding
            r = {"arch": name, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        r["transformers"] = transformers.__version__
        print(json.dumps(r), flush=True)
        failed |= not r["ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
