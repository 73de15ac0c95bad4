#!/usr/bin/python3
"""Runs torch.optim (Debian's python3-torch 1.13) on given parameters and per-step gradients and
writes the resulting parameters: the oracle for tests/optim/torch_optim_test.cc.

Usage: /usr/bin/python3 scripts/torch_optim_reference.py IN.json OUT.json

IN.json:  {"cases": [case, ...]}, each case
          {"optimizer": "sgd|adam|adamw|adagrad|rmsprop", "hyperparameters": {memo's names},
           "lrs": [lr of step 1, ...],
           "tensors": [{"name": str, "shape": [int], "decay": bool, "data": [float]}],
           "grads": [[[float] per tensor] per step]}
OUT.json: {"cases": [{"tensors": [{"name": str, "data": [float]}]}, ...]}, in the same order.
Many cases per call because importing torch takes seconds.

Weight decay goes to the tensors with "decay": true (a second parameter group with decay 0 holds
the rest), as memo's per-tensor decay mask. fp32 throughout; foreach=False selects torch's
single-tensor loops. Exits non-zero with a message on any error.
"""
import json
import sys

TORCH_NAMES = ("sgd", "adam", "adamw", "adagrad", "rmsprop")


def build(name, h, decayed, plain):
    import torch
    wd = h.get("weight_decay", 0.0)
    groups = [{"params": decayed, "weight_decay": wd}, {"params": plain, "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    if name == "sgd":
        return torch.optim.SGD(groups, lr=1.0, momentum=h["momentum"], dampening=h["dampening"],
                               nesterov=h["nesterov"], foreach=False)
    if name == "adam":
        return torch.optim.Adam(groups, lr=1.0, betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                                foreach=False)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=1.0, betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                                 foreach=False)
    if name == "adagrad":
        return torch.optim.Adagrad(groups, lr=1.0, lr_decay=h["lr_decay"], eps=h["eps"],
                                   initial_accumulator_value=h["initial_accumulator_value"],
                                   foreach=False)
    if name == "rmsprop":
        return torch.optim.RMSprop(groups, lr=1.0, alpha=h["alpha"], eps=h["eps"],
                                   momentum=h["momentum"], centered=h["centered"], foreach=False)
    raise AssertionError(name)  # names are checked before torch is imported


def run_case(spec):
    import torch
    params = [torch.tensor(t["data"], dtype=torch.float32).reshape(t["shape"]).requires_grad_()
              for t in spec["tensors"]]
    decayed = [p for p, t in zip(params, spec["tensors"]) if t["decay"]]
    plain = [p for p, t in zip(params, spec["tensors"]) if not t["decay"]]
    opt = build(spec["optimizer"], spec["hyperparameters"], decayed, plain)
    for lr, grads in zip(spec["lrs"], spec["grads"]):
        for group in opt.param_groups:
            group["lr"] = lr
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g, dtype=torch.float32).reshape(p.shape)
        opt.step()
    return {"tensors": [{"name": t["name"], "data": p.detach().reshape(-1).tolist()}
                        for p, t in zip(params, spec["tensors"])]}


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: torch_optim_reference.py IN.json OUT.json")
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    for i, spec in enumerate(cases):  # fail fast, before the slow torch import
        if spec["optimizer"] not in TORCH_NAMES:
            raise SystemExit(f"torch_optim_reference.py: case {i}: no torch counterpart for "
                             f"optimizer '{spec['optimizer']}'; valid: {', '.join(TORCH_NAMES)}")
        if len(spec["grads"]) != len(spec["lrs"]):
            raise SystemExit(f"torch_optim_reference.py: case {i}: {len(spec['grads'])} gradient "
                             f"steps but {len(spec['lrs'])} learning rates")
    import torch
    torch.set_num_threads(1)
    out = {"cases": [run_case(spec) for spec in cases]}
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
