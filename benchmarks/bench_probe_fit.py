"""Probe fitting, scikit-learn one fit at a time vs the batched torch backend, SDXL-shaped.

SDXL's text encoders give 46 layers (CLIP ViT-L: 13 hidden states at 768 dims; OpenCLIP bigG:
33 at 1,280), each with 6 poolings (eos, mean, 4 slot spans), on 1,500 prompts with 4 targets
(two colours of 11 values, two objects of 8). "The whole fit" is what `fit_probes` does per
array: `decodability` for each target (grouped 5-fold CV + the control task: 40 fits an array)
and, on the 2 prompt-level poolings, `failure_prediction` (probe + prompt-only baseline).
Synthetic float32 activations with a planted, layer-dependent signal.

Both backends are timed on the same `--sample` arrays of each width, in one run, alternately;
the whole-suite time is extrapolated linearly by array count (the output says so). `--full`
also runs the torch backend over all 276 arrays.

    python benchmarks/bench_probe_fit.py [--sample 2] [--full] [--device cpu|cuda] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from _common import write

WIDTHS = {768: 13, 1280: 33}  # dims: layers (SDXL: CLIP-L hidden states, bigG hidden states)
POOLINGS = ("eos", "mean", "slot-c1", "slot-o1", "slot-c2", "slot-o2")
PROMPT_LEVEL = 2  # eos, mean: the poolings failure prediction runs on


def synthetic(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    targets = {"c1": rng.integers(0, 11, n), "o1": rng.integers(0, 8, n),
               "c2": rng.integers(0, 11, n), "o2": rng.integers(0, 8, n)}
    groups = rng.integers(0, n // 4, n)  # ~4 prompts per composition
    failed = rng.random(n) < 0.25 + 0.05 * (targets["c1"] % 4)
    base = np.concatenate([np.eye(k, dtype=np.float32)[targets[t]] for t, k in
                           (("c1", 11), ("o1", 8), ("c2", 11), ("o2", 8))], 1)
    return targets, groups, failed, base


def make_array(n: int, dim: int, layer: int, targets, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1000 * layer + dim)
    X = rng.standard_normal((n, dim)).astype(np.float32)
    for k, (name, y) in enumerate(targets.items()):
        X += (0.02 * (layer + 1) / (k + 1)) * rng.standard_normal((int(y.max()) + 1, dim)).astype(np.float32)[y]
    return X * rng.uniform(0.5, 3, dim).astype(np.float32) + rng.normal(0, 2, dim).astype(np.float32)


def fit_arrays(arrays, n_prompt_level: int, data, backend: str, device: str, n_boot: int) -> tuple[list, list]:
    """What fit_probes does for these arrays: all their decodability jobs at once, then failure."""
    from t2i_audit.probes import linear

    targets, groups, failed, base = data
    jobs = [(X, None, y.astype(str), groups) for X in arrays for y in targets.values()]
    dec = linear.decodability_many(jobs, backend=backend, device=device)
    fail = linear.failure_prediction_many([(X, failed, groups, base) for X in arrays[:n_prompt_level]],
                                          backend=backend, device=device, n_boot=n_boot)
    return dec, fail


def run(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    data = synthetic(args.prompts)
    out, est_old, est_new, diffs = {}, 0.0, 0.0, []
    for dim, layers in WIDTHS.items():
        n_arrays = layers * len(POOLINGS)
        sample = [make_array(args.prompts, dim, L, data[0], args.seed) for L in range(args.sample)]
        n_pl = min(len(sample), max(1, round(len(sample) * PROMPT_LEVEL / len(POOLINGS))))
        times = {"sklearn": [], "torch": []}
        res = {}
        for rep in range(args.reps):  # alternate, so load drift hits both alike
            for backend in (("sklearn", "torch") if rep % 2 == 0 else ("torch", "sklearn")):
                t0 = time.perf_counter()
                res[backend] = fit_arrays(sample, n_pl, data, backend, args.device if backend == "torch" else "cpu",
                                          args.n_boot)
                times[backend].append(time.perf_counter() - t0)
        acc = [abs(a[0]["accuracy"] - b[0]["accuracy"]) for a, b in zip(res["sklearn"][0], res["torch"][0])]
        ptrue = [float(np.abs(a[1] - b[1]).max()) for a, b in zip(res["sklearn"][0], res["torch"][0])]
        auc = [abs(a["auroc"]["auroc"] - b["auroc"]["auroc"]) for a, b in zip(res["sklearn"][1], res["torch"][1])]
        diffs += acc
        # per array: decodability on every pooling, failure on the prompt-level share of them
        t_old, t_new = min(times["sklearn"]), min(times["torch"])
        scale = n_arrays / len(sample)
        est_old += t_old * scale
        est_new += t_new * scale
        out[f"{dim}_dims"] = {
            "arrays_in_suite": n_arrays, "arrays_timed": len(sample), "of_which_prompt_level": n_pl,
            "fits_timed_per_backend": len(sample) * 4 * 2 * 5 + n_pl * 2 * 5,
            "sklearn_s": [round(t, 2) for t in times["sklearn"]], "torch_s": [round(t, 2) for t in times["torch"]],
            "speedup": round(t_old / t_new, 2),
            "max_abs_accuracy_diff": round(max(acc), 4), "max_abs_p_true_diff": round(max(ptrue), 5),
            "max_abs_auroc_diff": round(max(auc), 4) if auc else None}
        print(dim, out[f"{dim}_dims"], flush=True)
    result = {"device": args.device, "threads": args.threads, "prompts": args.prompts,
              "suite_shape": {"layers": WIDTHS, "poolings": list(POOLINGS), "targets": 4, "folds": 5},
              "by_width": out,
              "whole_suite_estimate_s": {"sklearn": round(est_old, 1), "torch": round(est_new, 1),
                                         "speedup": round(est_old / est_new, 2),
                                         "how": "EXTRAPOLATED: the per-array time of the timed sample (best of "
                                                f"{args.reps}) x arrays of that width in the suite"}}
    if args.full:
        t0 = time.perf_counter()
        for dim, layers in WIDTHS.items():
            for start in range(0, layers * len(POOLINGS), args.batch):
                arrays = [make_array(args.prompts, dim, (start + i) % layers, data[0], args.seed + start + i)
                          for i in range(min(args.batch, layers * len(POOLINGS) - start))]
                fit_arrays(arrays, max(1, len(arrays) * PROMPT_LEVEL // len(POOLINGS)), data, "torch",
                           args.device, args.n_boot)
        result["torch_full_suite_measured_s"] = round(time.perf_counter() - t0, 1)
    return result


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=1500)
    ap.add_argument("--sample", type=int, default=2, help="arrays of each width timed with both backends")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--full", action="store_true", help="also time the torch backend on all 276 arrays")
    ap.add_argument("--batch", type=int, default=12, help="arrays per batched call in --full")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def main() -> None:
    args = parser().parse_args()
    load = os.getloadavg()
    res = run(args)
    write("probe_fit", {"load_average_1_5_15_start": [round(x, 2) for x in load],
                        "load_average_1_5_15_end": [round(x, 2) for x in os.getloadavg()], **res,
                        "note": "old = linear.* with backend='sklearn' (one fit at a time, threadpool 1); "
                                "new = backend='torch' (torch_fit, batched, float32 on CPU). Same grouped folds. "
                                "Timings include the bootstrap CIs of failure prediction, the same for both."})


if __name__ == "__main__":
    main()
