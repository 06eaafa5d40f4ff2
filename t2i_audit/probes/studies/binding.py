"""When does binding (and layout) become readable? AUROC by step per feature family, per category.

For every step read (5 % … 50 % of the loop) and every family — the early study's ``attention``,
``pooled``, ``probe`` (per_image.FAMILIES), the binding families of ``binding_features`` (``heads``,
``rawmaps``, ``overlap``, ``cfg``, ``x0colour``, each with the prompt's one-hot constituents so they are
read *beyond* the prompt), the x0 preview judged (unfitted) and fitted on its per-question answers, and the
prompt-only baseline — the out-of-fold AUROC of predicting the final judge's failure, with a twin-group
bootstrap CI, on the selection study's folds (``risks.layout``). Each family is tested against the
prompt-only baseline (paired twin-group bootstrap; p by the normal approximation from its CI), all tests
Holm-corrected together: "readable at step s"
means the family beats the prompt alone there after correction.

Writes ``probes/binding.json``.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from ...rundir import RunDir, atomic_write_json
from ...clusters import holm, p_from_ci
from .risks import Risks, layout, too_small

EARLY = ("attention", "pooled", "probe")


def study(rd: RunDir, *, seed: int = 0, n_boot: int = 1000, n_splits: int = 5, progress: bool = True) -> dict:
    from ... import stats
    from ..capture.early import load_early, step_label
    from ..early_stage import image_verdicts
    from ..fit.linear import onehot_constituents
    from ..fit.per_image import design
    from .trajectory import FAMILIES as TRAJ
    from .trajectory import load as load_traj

    arrays, rows, meta = load_early(rd)
    traj, trows, tmeta = load_traj(rd)
    at = {k: i for i, k in enumerate(trows)}
    tr_index = np.array([at[k] for k in rows])
    prompts = rd.read_prompts()
    by_id = {p["id"]: p for p in prompts}
    verdicts, deciding, _ = image_verdicts(rd, prompts)
    row_of = {k: i for i, k in enumerate(rows)}
    S = 1 + max(k for _, k in rows)
    onehot, _ = onehot_constituents([by_id[pid] for pid, _ in rows])
    steps = [s for s in meta["steps"] if s in tmeta["steps"]]
    out: dict = {"loop_steps": meta["loop_steps"], "steps": steps, "labels_from": deciding,
                 "families": [*EARLY, *TRAJ, "x0", "x0-fitted", "prompt-only"], "columns": tmeta["columns"],
                 "categories": {}}
    tests: dict = {}
    for cat in sorted({str(p.get("category")) for p in prompts}):
        lay = layout(cat, prompts, row_of, verdicts, S, n_splits=n_splits, seed=seed)
        why = too_small(lay)
        if why:
            out["categories"][cat] = {"skipped": why}
            continue
        R = Risks(lay, rd.probes_dir / ".selection_cache", seed=seed, tag=meta["key"])
        y, g = lay.y_fail, lay.image_groups
        base = R.oof("prompt-only", onehot).ravel()
        res: dict = {"n_images": int(len(y)), "failure_rate": float(y.mean()),
                     "prompt-only": stats.auroc_ci(y, base, n_boot=n_boot, seed=seed, groups=g), "steps": {}}
        for step in steps:
            t0 = time.perf_counter()
            risks: dict = {}
            for fam in EARLY:
                risks[fam] = R.oof(f"{fam}-t{step}", design(arrays, step, fam, slice(None), onehot))
            for fam in TRAJ:
                X = np.hstack([np.asarray(traj[f"{fam}__t{step:03d}"], np.float32)[tr_index], onehot])
                risks[fam] = R.oof(f"{fam}-t{step}", X)
            x0 = arrays.get(f"x0__t{step:03d}")
            if x0 is not None:
                risks["x0"] = 1.0 - np.asarray(x0[:, 0], float)[lay.rows]
                risks["x0-fitted"] = R.oof(f"x0fit-t{step}", np.asarray(x0[:, 1:], np.float32))
            per = {}
            for fam, r in risks.items():
                d = stats.auroc_diff_ci(y, r.ravel(), base, n_boot=n_boot, seed=seed, groups=g)
                d["p"] = p_from_ci(d["diff"], d["ci"])  # normal approximation: a count p stops at 1/n_boot
                per[fam] = {"auroc": stats.auroc_ci(y, r.ravel(), n_boot=n_boot, seed=seed, groups=g),
                            "minus_prompt_only": d}
                tests[f"{cat} | {fam} | t{step:03d}"] = d.get("p")
            res["steps"][f"t{step:03d}"] = {"iterations": step + 1, "fraction": (step + 1) / meta["loop_steps"],
                                            "families": per}
            if progress:
                best = max(per, key=lambda f: per[f]["auroc"]["auroc"])
                print(f"[binding] {cat} {step_label(step, meta['loop_steps'])}: best {best} "
                      f"{per[best]['auroc']['auroc']:.3f} "
                      f"({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
        out["categories"][cat] = res
    adj = holm(tests)
    for cat, res in out["categories"].items():
        for tag, st in res.get("steps", {}).items():
            for fam, v in st["families"].items():
                v["p_holm"] = adj.get(f"{cat} | {fam} | {tag}")
                v["readable"] = bool(v["p_holm"] is not None and v["p_holm"] < 0.05
                                     and v["minus_prompt_only"]["diff"] > 0)
        res["first_readable"] = {fam: next((st["iterations"] for st in res.get("steps", {}).values()
                                            if st["families"].get(fam, {}).get("readable")), None)
                                 for fam in out["families"] if fam != "prompt-only"}
    out["correction"] = f"Holm over {len(adj)} tests (family − prompt-only AUROC, every category × step × family)"
    return out


def run(run_dir, *, seed: int = 0, n_boot: int = 1000, progress: bool = True) -> dict:
    from ..early_stage import _clean

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    res = study(rd, seed=seed, n_boot=n_boot, progress=progress)
    rd.probes_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(rd.probes_dir / "binding.json", _clean(res))
    return res
