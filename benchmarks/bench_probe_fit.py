"""Probe fitting, whole-suite estimate: the batched torch backend against scikit-learn, SDXL-shaped.

SDXL's text encoders give 46 layers (CLIP ViT-L: 13 hidden states at 768 dims; OpenCLIP bigG:
33 at 1,280), each with 6 poolings (eos, mean, 4 slot spans), on 1,500 prompts with 4 targets
(two colours of 11 values, two objects of 8). "The whole fit" is what `fit_probes` does per
array: `decodability` for each target (grouped 5-fold CV + the control task: 40 fits an array)
and, on the 2 prompt-level poolings, `failure_prediction` (probe + prompt-only baseline).
Synthetic float32 activations with a planted, layer-dependent signal, in two kinds: `isotropic`
(independent features) and `anisotropic` (a power-law feature spectrum and a few massive dimensions,
as real text-encoder states have; harder for every solver).

Three fitters, on the same `--sample` arrays of each width, in one run, alternately (best of `--reps`):
* `torch`   — the tool's default backend (fit/logistic.py + fit/lbfgs.py: all problems of a call as one
  batched L-BFGS, float32 matmuls, `--threads` threads), converged to max|grad| <= 1e-7;
* `sklearn` — the reference backend: the converged scikit-learn pipeline (float64, tol=1e-7), one fit
  at a time, BLAS limited to 1 thread (as the tool runs it: threads only contend on such small fits);
* `sklearn_loose` (context) — what the reference was before the fits converged: StandardScaler +
  LogisticRegression(tol=1e-3, max_iter=500), stopped far from the optimum.
The whole-suite time is extrapolated linearly by array count (the output says so). Each run stores
its thread count's entry of benchmarks/results/probe_fit.json, keeping the others, into a new timestamped file (never over the committed one):

    python benchmarks/bench_probe_fit.py --threads 2     # 2 threads
    python benchmarks/bench_probe_fit.py --threads 1     # 1 thread
    python benchmarks/bench_probe_fit.py [--sample 1] [--data isotropic,anisotropic] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from _common import RESULTS, write

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


def make_array(n: int, dim: int, layer: int, targets, seed: int, kind: str = "isotropic") -> np.ndarray:
    rng = np.random.default_rng(seed + 1000 * layer + dim)
    if kind == "isotropic":
        X = rng.standard_normal((n, dim)).astype(np.float32)
        for k, (name, y) in enumerate(targets.items()):
            X += (0.02 * (layer + 1) / (k + 1)) * rng.standard_normal((int(y.max()) + 1, dim)).astype(np.float32)[y]
    else:  # eigenvalues ∝ 1/rank in a random basis, the signal in the leading 64 directions, 4 massive dims
        r = min(n, dim)
        F = rng.standard_normal((n, r)) * np.arange(1, r + 1) ** -0.5
        for k, (name, y) in enumerate(targets.items()):
            F[:, :64] += (0.05 * (layer + 1) / (k + 1)) * rng.standard_normal((int(y.max()) + 1, 64))[y]
        X = F @ np.linalg.qr(rng.standard_normal((dim, r)))[0].T
        X[:, :4] *= 20
    return (X * rng.uniform(0.5, 3, dim) + rng.normal(0, 2, dim)).astype(np.float32)


def _loose_reference(monkey):
    """Swap the pipeline's sklearn fit for the pre-convergence one (tol=1e-3, max_iter=500)."""
    from t2i_audit.probes.fit import pipeline

    def loose(C=1.0, *, scale=True, impute=False, seed=0):
        model = original(C, scale=scale, impute=impute, seed=seed)
        model[-1].set_params(tol=1e-3, max_iter=500)
        return model

    original = pipeline.sklearn_pipeline
    pipeline.sklearn_pipeline = loose if monkey else original
    return lambda: setattr(pipeline, "sklearn_pipeline", original)


def fit_arrays(arrays, n_prompt_level: int, data, backend: str, device: str, n_boot: int) -> tuple[list, list]:
    """What fit_probes does for these arrays: all their decodability jobs at once, then failure."""
    from t2i_audit.probes.fit import linear

    targets, groups, failed, base = data
    jobs = [(X, None, y.astype(str), groups) for X in arrays for y in targets.values()]
    dec = linear.decodability_many(jobs, backend=backend, device=device)
    fail = linear.failure_prediction_many([(X, failed, groups, base) for X in arrays[:n_prompt_level]],
                                          backend=backend, device=device, n_boot=n_boot)
    return dec, fail


def timed_fit(fitter, sample, n_pl, data, args):
    import warnings

    backend = "torch" if fitter == "torch" else "sklearn"
    restore = _loose_reference(fitter == "sklearn_loose")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the loose fits warn that they stopped early
            t0 = time.perf_counter()
            res = fit_arrays(sample, n_pl, data, backend, args.device if backend == "torch" else "cpu", args.n_boot)
            return time.perf_counter() - t0, res
    finally:
        restore()


def run_kind(kind: str, args, data) -> dict:
    out, est = {}, {f: 0.0 for f in args.fitters}
    for dim, layers in WIDTHS.items():
        n_arrays = layers * len(POOLINGS)
        sample = [make_array(args.prompts, dim, L, data[0], args.seed, kind)
                  for L in np.linspace(0, layers - 1, args.sample).round().astype(int)]
        n_pl = min(len(sample), max(1, round(len(sample) * PROMPT_LEVEL / len(POOLINGS))))
        times: dict[str, list] = {f: [] for f in args.fitters}
        res = {}
        for rep in range(args.reps):  # alternate, so load drift hits every fitter alike
            for fitter in (args.fitters if rep % 2 == 0 else args.fitters[::-1]):
                t, res[fitter] = timed_fit(fitter, sample, n_pl, data, args)
                times[fitter].append(t)
                print(kind, dim, fitter, round(t, 2), flush=True)
        best = {f: min(ts) for f, ts in times.items()}
        scale = n_arrays / len(sample)
        for f in args.fitters:
            est[f] += best[f] * scale
        entry = {"arrays_in_suite": n_arrays, "arrays_timed": len(sample), "of_which_prompt_level": n_pl,
                 "fits_timed_per_fitter": len(sample) * 4 * 2 * 5 + n_pl * 2 * 5,
                 **{f"{f}_s": [round(t, 2) for t in times[f]] for f in args.fitters},
                 "speedup_vs_sklearn": round(best["sklearn"] / best["torch"], 2)}
        if "sklearn" in res and "torch" in res:
            (dec_s, fail_s), (dec_t, fail_t) = res["sklearn"], res["torch"]
            entry["max_abs_p_true_diff"] = float(max(np.abs(a[1] - b[1]).max() for a, b in zip(dec_s, dec_t)))
            entry["max_abs_accuracy_diff"] = float(max(abs(a[0]["accuracy"] - b[0]["accuracy"])
                                                       for a, b in zip(dec_s, dec_t)))
            entry["max_abs_auroc_diff"] = float(max(abs(a["auroc"]["auroc"] - b["auroc"]["auroc"])
                                                    for a, b in zip(fail_s, fail_t)))
        if "sklearn_loose" in res:
            entry["loose_vs_converged_max_abs_accuracy_diff"] = float(max(
                abs(a[0]["accuracy"] - b[0]["accuracy"]) for a, b in zip(res["sklearn_loose"][0], res["sklearn"][0])))
            entry["loose_vs_converged_max_abs_auroc_diff"] = float(max(
                abs(a["auroc"]["auroc"] - b["auroc"]["auroc"]) for a, b in zip(res["sklearn_loose"][1], res["sklearn"][1])))
        out[f"{dim}_dims"] = entry
        print(kind, dim, entry, flush=True)
    return {"by_width": out,
            "whole_suite_estimate_s": {**{f: round(t, 1) for f, t in est.items()},
                                       "speedup_vs_sklearn": round(est["sklearn"] / est["torch"], 2),
                                       **({"speedup_vs_sklearn_loose": round(est["sklearn_loose"] / est["torch"], 2)}
                                          if "sklearn_loose" in est else {}),
                                       "how": "EXTRAPOLATED: the per-array time of the timed sample (best of "
                                              f"{args.reps}) x arrays of that width in the suite"}}


def run(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    data = synthetic(args.prompts)
    kinds = {kind: run_kind(kind, args, data) for kind in args.data.split(",")}
    return {"device": args.device, "threads": args.threads, "prompts": args.prompts,
            "suite_shape": {"layers": WIDTHS, "poolings": list(POOLINGS), "targets": 4, "folds": 5},
            "by_data": kinds}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=1500)
    ap.add_argument("--sample", type=int, default=2, help="arrays of each width timed with every fitter")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--data", default="isotropic,anisotropic")
    ap.add_argument("--fitters", default="torch,sklearn,sklearn_loose")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def res_kinds(args) -> list[str]:
    return args.data.split(",")


def main() -> None:
    args = parser().parse_args()
    args.fitters = args.fitters.split(",")
    load = os.getloadavg()
    res = run(args)
    path = RESULTS / "probe_fit.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    runs = old.get("runs", {}) if isinstance(old.get("runs"), dict) else {}
    entry = runs.get(f"{args.device}_{args.threads}_threads", {})
    kinds = {**entry.get("by_data", {}), **res.pop("by_data")}  # one data kind per run keeps the others
    for kind in res_kinds(args):
        kinds[kind].update(utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           load_average_1_5_15_start=[round(x, 2) for x in load],
                           load_average_1_5_15_end=[round(x, 2) for x in os.getloadavg()])
    runs[f"{args.device}_{args.threads}_threads"] = {**res, "by_data": kinds}
    write("probe_fit", {"runs": runs, "note": (
        "torch = the default backend (fit/logistic.py + fit/lbfgs.py: batched L-BFGS, converged to max|grad| <= 1e-7); "
        "sklearn = the reference backend (the converged sklearn pipeline, float64, tol=1e-7, one fit at a time, "
        "BLAS 1 thread); sklearn_loose = the pre-convergence reference (tol=1e-3, max_iter=500), for context. "
        "Same grouped folds; timings include the bootstrap CIs of failure prediction, the same for all.")})


if __name__ == "__main__":
    main()
