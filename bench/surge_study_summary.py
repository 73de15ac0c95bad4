#!/usr/bin/env python3
"""Tables for bench/surge_study.sh from the `memo fit --json` files it wrote (sweeps) or from the
training logs of its schedule stage (--schedule). Reads OUT, prints plain text; no fitting here:
every number about the laws comes from memo fit."""
import glob
import json
import math
import os
import statistics
import sys

NAMES = {"sign": "sign-Adam (0, 0)", "adam": "Adam (0.9, 0.999)", "sgd": "SGD"}


def fmt_ci(v, lo, hi):
    def g(x):
        if x is None or (isinstance(x, float) and not math.isfinite(x)):
            return "-"
        return f"{x:.3g}"
    return f"{g(v)} [{g(lo)}, {g(hi)}]"


def turn(batches):
    """Does the optimum fall past its peak by more than the seeds' spread? (peak batch, verdict)"""
    pts = [b for b in batches if b["lr_opt"] is not None]
    if len(pts) < 3:
        return None, "too few batch sizes"
    k = max(range(len(pts)), key=lambda i: pts[i]["lr_opt"])
    peak = pts[k]
    if k == len(pts) - 1:
        return peak["batch_tokens"], "no turn: the optimum is highest at the largest batch"
    last = pts[-1]
    if not peak["seed_lrs"] or not last["seed_lrs"]:
        return peak["batch_tokens"], (f"falls x{peak['lr_opt'] / last['lr_opt']:.2f} past the peak "
                                      "(one seed: no spread to judge it by)")
    lo_peak, hi_last = min(peak["seed_lrs"]), max(last["seed_lrs"])
    drop = peak["lr_opt"] / last["lr_opt"]
    if hi_last < lo_peak:
        return peak["batch_tokens"], f"turn: falls x{drop:.2f} from the peak, beyond every seed's spread"
    return peak["batch_tokens"], f"falls x{drop:.2f} past the peak, within the seeds' spread"


def sweep_tables(out):
    for opt in ("sign", "adam", "sgd"):
        for proto in ("target", "fixed", "fixed_quarter"):
            path = os.path.join(out, f"{opt}_{proto}.fit.json")
            if not os.path.exists(path):
                continue
            analyses = json.load(open(path))
            if isinstance(analyses, dict):
                analyses = [analyses]
            for a in analyses:
                where = (f"target loss {a['target_level']}" if a.get("target_level") is not None
                         else a["metric"])
                print(f"== {NAMES[opt]}, {proto.replace('_', ' ')} protocol, judged by {where}: "
                      f"{a['runs']} runs, {a['seeds']} seeds")
                print(f"{'batch':>7} {'lr_opt':>9} {'seeds lo-hi':>19} {'B_simple':>9} {'S':>7} {'E':>9}")
                for b in a["batches"]:
                    sl = b["seed_lrs"]
                    rng = f"{min(sl):.2e}-{max(sl):.2e}" if sl else "-"
                    edge = " edge" if b["at_grid_edge"] else ""
                    bs = f"{b['b_simple']:.0f}" if b["b_simple"] is not None else "-"
                    s = f"{b['target_steps']:.0f}" if b.get("target_steps") is not None else "-"
                    e = f"{b['target_tokens']:.0f}" if b.get("target_tokens") is not None else "-"
                    print(f"{b['batch_tokens']:7.0f} {b['lr_opt']:9.3e} {rng:>19} {bs:>9} {s:>7} {e:>9}{edge}")
                laws = a["laws"]
                for name in ("surge", "sgd"):
                    f = laws[name]
                    print(f"  {name} law: eps_max {fmt_ci(f['params'][0], f['ci_low'][0], f['ci_high'][0])}, "
                          f"B_noise {fmt_ci(f['params'][1], f['ci_low'][1], f['ci_high'][1])} tokens, "
                          f"RSS {f['rss']:.3g}, AICc {f['aicc']:.2f}" if f['aicc'] is not None else f"RSS {f['rss']:.3g}")
                print(f"  verdict (AICc): {a['best_law']}")
                t = a.get("target")
                bmax = max(b["batch_tokens"] for b in a["batches"])
                if t:
                    lo, hi = t["b_noise_ci"]
                    print(f"  Eq. 22: B_noise {fmt_ci(t['b_noise'], lo, hi)} tokens, S_min {t['s_min']:.3g} "
                          f"steps, E_min {t['e_min']:.3g} tokens; the largest batch is "
                          f"{bmax / t['b_noise']:.1f} x B_noise")
                    # the paper's own prediction: the surge law peaking at Eq. 22's B_noise with
                    # Eq. 23's eps_max (no free parameter), against the measured optima
                    bn, em = t["b_noise"], t["eps_max_surge"]
                    if em:
                        res = [math.log(b["lr_opt"] / (2 * em * math.sqrt(b["batch_tokens"] * bn)
                                                       / (b["batch_tokens"] + bn)))
                               for b in a["batches"]]
                        last = a["batches"][-1]
                        pred = 2 * em * math.sqrt(last["batch_tokens"] * bn) / (last["batch_tokens"] + bn)
                        print(f"  the paper's law (peak at Eq. 22's B_noise, eps_max {em:.3g} by Eq. 23): "
                              f"RSS {sum(r * r for r in res):.3g} (free surge fit {laws['surge']['rss']:.3g}, "
                              f"sgd {laws['sgd']['rss']:.3g}); at {last['batch_tokens']:.0f} tokens it "
                              f"predicts {pred:.2e}, measured {last['lr_opt']:.2e}")
                bsim = [b["b_simple"] for b in a["batches"] if b["b_simple"] is not None]
                if bsim:
                    print(f"  B_simple over the batches: {min(bsim):.0f}-{max(bsim):.0f} tokens "
                          f"(largest batch {bmax / statistics.median(bsim):.1f} x its median)")
                peak, verdict = turn(a["batches"])
                print(f"  optimum peaks at {peak} tokens: {verdict}")
                print()


def schedule_table(out, folder="schedule"):
    rows = {}
    seq = 128 if folder == "bpe" else 32
    for log in sorted(glob.glob(os.path.join(out, folder, "*-s*.jsonl"))):
        name, seed = os.path.basename(log)[:-6].rsplit("-s", 1)
        recs = [json.loads(l) for l in open(log) if l.strip()]
        if not recs or "val_loss" not in recs[-1]:
            continue
        last = recs[-1]
        secs_file = log[:-6] + ".seconds"
        secs = float(open(secs_file).read()) if os.path.exists(secs_file) else float("nan")
        changes = [r["batch_change"] for r in recs if "batch_change" in r]
        rows.setdefault(name, []).append({"val": last["val_loss"], "steps": last["step"],
                                          "tokens": last["tokens"], "batch": last["batch"],
                                          "secs": secs, "changes": len(changes)})

    def ms(xs):
        m = statistics.mean(xs)
        return f"{m:.4f} +- {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{m:.4f}"

    print(f"{'run':>12} {'seeds':>5} {'val loss (mean +- sd)':>24} {'steps':>7} {'tokens':>9} "
          f"{'last batch':>10} {'wall s':>7}")
    order = sorted(rows, key=lambda n: (not n.startswith("schedule"), n != "naive",
                                        int(n[5:]) if n.startswith("fixed") else 0, n))
    for name in order:
        r = rows[name]
        print(f"{name:>12} {len(r):5d} {ms([x['val'] for x in r]):>24} "
              f"{statistics.mean([x['steps'] for x in r]):7.0f} {statistics.mean([x['tokens'] for x in r]):9.0f} "
              f"{statistics.mean([x['batch'] for x in r]) * seq:10.0f} {statistics.mean([x['secs'] for x in r]):7.1f}")
    fixed = {n: statistics.mean([x["val"] for x in r]) for n, r in rows.items() if n.startswith("fixed")}
    if fixed:
        best = min(fixed, key=fixed.get)
        print(f"best fixed batch: {best[5:]} tokens (val {fixed[best]:.4f} in "
              f"{statistics.mean([x['steps'] for x in rows[best]]):.0f} steps)")
        for name in (n for n in order if n.startswith("schedule")):
            s = rows[name]
            print(f"{name}: val {statistics.mean([x['val'] for x in s]):.4f} in "
                  f"{statistics.mean([x['steps'] for x in s]):.0f} steps, "
                  f"{statistics.mean([x['changes'] for x in s]):.1f} batch changes")


def calibrate(out):
    """K for the noise schedule: Eq. 22's B_noise over the median B_simple at the same loss (the
    lowest level of the Adam target-loss sweep); 1 when either is missing."""
    a = json.load(open(os.path.join(out, "adam_target.fit.json")))
    a = a[-1] if isinstance(a, list) else a
    bs = [b["b_simple"] for b in a["batches"] if b["b_simple"]]
    print(f"{a['target']['b_noise'] / statistics.median(bs):.3g}" if a.get("target") and bs else 1)


if __name__ == "__main__":
    if sys.argv[1] == "--calibrate":
        calibrate(sys.argv[2])
    elif sys.argv[1] == "--schedule":
        schedule_table(sys.argv[2], *sys.argv[3:])
    else:
        sweep_tables(sys.argv[1])
