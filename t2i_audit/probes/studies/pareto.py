"""The selection study: success against cost per category, for every policy and reference, on one run.

Reads a run with S seeds per prompt, final verdicts and per-image early arrays (``probe --early``;
``activations/trajectory`` adds the CFG gap). Per category (prompts whose every seed is judged):

* **curves** — random (one seed), whole images judged by the final judge (best of n, n = 1…S), and,
  for each score, every policy of ``selection.grid`` (best K of N at a step, successive halving):
  ``probe`` (out-of-fold per-image probe), ``x0`` (the x0 preview judged, unfitted: 1 − share of questions
  passed), ``x0-fitted`` (a probe on the preview's per-question answers: same folds, nested C), ``cfg``
  (CFG-Rejection's accumulated CFG gap, its direction read off the training folds; no probe), and, as
  exploration, ``rawmaps`` (the binding study's slot maps in the relation's frame + one-hot);
  each policy's success with a CI, and its gap to the whole-image curve at the same loop iterations;
* **headline** — the pre-registered policy (``preregistered.HEADLINE``), tested alone at α;
* **exploration** — every other policy's gap, Holm-corrected together;
* **budgets** — ``budget.nested`` at each budget: what "choose by inner CV, score on held-out prompts" wins;
* **controls** — the probe fitted on permuted labels (AUROC and the headline policy's lift should sit
  at chance), probe − fitted x0 and probe − x0 AUROC at each step;
* **seen vs unseen prompts** — seeds S/2…S−1 ranked by a probe fitted on the other seeds of the same
  prompts, beside the same seeds ranked out of fold (unseen compositions).

Writes ``probes/selection.json`` and ``probes/selection_outcomes.jsonl`` (per prompt × runnable policy:
expected success and cost, what ``select --budget`` chooses from).
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import numpy as np

from ...rundir import RunDir, atomic_write_json, atomic_write_jsonl
from . import preregistered
from .budget import nested
from .clusters import GroupBootstrap, holm, normal_p
from .risks import Risks, layout, seeds_refusal, too_small
from .selection import Staged, Whole, grid, on_curve, simulate, whole_curve

BUDGET_IMAGES = (1, 1.5, 1.8, 2, 2.5, 3, 4, 5, 6, 8)  # budgets in whole images' worth of loop iterations
SCORES = ("probe", "x0", "x0-fitted", "cfg", "rawmaps")  # rawmaps: the binding study's best spatial family (exploration)
RUNNABLE = ("probe",)  # scores `select` can rank by (a fitted probe exported per step)


def _unit_seconds(path: Path | None) -> dict | None:
    from ...safeload import read_json

    if path is None or not Path(path).exists():
        return None
    got = read_json(path)
    return got.get("seconds_per") if isinstance(got, dict) else None


def scores_for(lay, R: Risks, arrays: dict, traj: dict | None, traj_rows: dict | None, steps: list[int],
               onehot: np.ndarray, progress: bool, loop_steps: int = 0) -> dict:
    """score → loop step → (P, S) risk."""
    from ..capture.early import step_label
    from ..fit.per_image import design

    out: dict = {s: {} for s in SCORES}
    for step in steps:
        t0 = time.perf_counter()
        out["probe"][step] = R.oof(f"probe-t{step}", design(arrays, step, "probe", slice(None), onehot))
        x0 = arrays.get(f"x0__t{step:03d}")
        if x0 is not None:
            out["x0"][step] = 1.0 - np.asarray(x0[:, 0], float)[lay.rows]
            out["x0-fitted"][step] = R.oof(f"x0fit-t{step}", np.asarray(x0[:, 1:], np.float32))
        if traj is not None and f"cfg__t{step:03d}" in traj:
            cfg = np.asarray(traj[f"cfg__t{step:03d}"][:, 1], float)  # column 1: log10 ASD accumulated over 0…step
            out["cfg"][step] = R.signed(f"cfg-t{step}", cfg[traj_rows])
            raw = np.hstack([np.asarray(traj[f"rawmaps__t{step:03d}"], np.float32)[traj_rows], onehot])
            out["rawmaps"][step] = R.oof(f"rawmaps-t{step}", raw)  # the binding study's fit (same cache entry)
        if progress:
            print(f"[selection] {lay.category} {step_label(step, loop_steps)}: risks ({time.perf_counter() - t0:.0f}s)",
                  file=sys.stderr)
    return {k: v for k, v in out.items() if v}


def _policy_rows(policies, success, risks, curve, T, boot: GroupBootstrap, unit: dict | None = None
                 ) -> tuple[list[dict], np.ndarray]:
    per = np.stack([simulate(p, success, risks) for p in policies], axis=1)  # (P, n_policies)
    gaps = np.stack([per[:, i] - on_curve(curve, p.cost(T).iterations) for i, p in enumerate(policies)], axis=1)
    succ_b, gap_b = boot.means(per), boot.means(gaps)
    rows = []
    for i, p in enumerate(policies):
        c = p.cost(T)
        gb = gap_b[:, i][np.isfinite(gap_b[:, i])]
        p_gap = normal_p(float(np.nanmean(gaps[:, i])), float(gb.std())) if len(gb) else None
        rows.append({"policy": p.name, "family": p.family, "spec": p.as_dict(), "cost": c.as_dict(),
                     "success": float(per[:, i].mean()),
                     "ci": [float(x) for x in np.nanquantile(succ_b[:, i], [0.025, 0.975])],
                     "gap_to_whole": float(np.nanmean(gaps[:, i])) if np.isfinite(gaps[:, i]).any() else None,
                     "gap_ci": [float(x) for x in np.nanquantile(gb, [0.025, 0.975])] if len(gb) else None,
                     "p_gap": p_gap})
        if unit:  # the judge's and the decoder's cost in measured seconds, beside the iterations
            rows[-1]["seconds"] = c.seconds(unit)
            rows[-1]["iteration_equivalents"] = c.seconds(unit) / unit["iteration"]
    return rows, per


def frontier(rows: list[dict]) -> list[dict]:
    """The rows not beaten by a cheaper-or-equal row with higher success (upper-left envelope), by cost."""
    out, best = [], -1.0
    for r in sorted(rows, key=lambda r: (r["cost"]["iterations"], -r["success"])):
        if r["success"] > best + 1e-12:
            out.append(r)
            best = r["success"]
    return out


def _auroc_table(lay, scores: dict, boot_groups, n_boot: int, seed: int) -> dict:
    from ... import stats

    y = lay.y_fail
    out: dict = {}
    for name, by in scores.items():
        for step, r in by.items():
            out.setdefault(name, {})[f"t{step:03d}"] = stats.auroc_ci(y, r.ravel(), n_boot=n_boot, seed=seed,
                                                                       groups=boot_groups)
    return out


def _diffs(lay, scores: dict, n_boot: int, seed: int) -> dict:
    """probe − x0-fitted and probe − x0 (AUROC, paired, twin-group bootstrap) at each step."""
    from ... import stats

    y, g = lay.y_fail, lay.image_groups
    out: dict = {}
    for ref in ("x0-fitted", "x0", "cfg"):
        for step, r in scores.get(ref, {}).items():
            if step in scores["probe"]:
                out.setdefault(f"probe − {ref}", {})[f"t{step:03d}"] = stats.auroc_diff_ci(
                    y, scores["probe"][step].ravel(), r.ravel(), n_boot=n_boot, seed=seed, groups=g)
    return out


def _permutation(lay, R: Risks, X: np.ndarray, step: int, policy: Staged, boot: GroupBootstrap, seed: int,
                 n_boot: int) -> dict:
    """The probe fitted on labels shuffled across the category's images, judged against the real labels."""
    from ... import stats

    y = lay.y_fail
    perm = np.random.default_rng(seed + 1).permutation(y)
    r = R.oof(f"probe-perm-t{step}", X, y=perm)
    lift = simulate(policy, lay.success, {"probe": {step: r}}) - lay.success.mean(1)
    return {"step": step, "auroc": stats.auroc_ci(y, r.ravel(), n_boot=n_boot, seed=seed, groups=lay.image_groups),
            "policy": policy.name, "lift_over_random": boot.summary(lift, null=0.0)}


def _seen_unseen(lay, R: Risks, X: np.ndarray, step: int, oof: np.ndarray, boot: GroupBootstrap) -> dict:
    """Seeds S/2…S−1: ranked by a probe that saw the same prompts' other seeds vs one that saw no twin group."""
    S = lay.shape[1]
    half = slice(S // 2, S)
    seen = R.seed_split(f"probe-t{step}", X)[:, half]
    succ = lay.success[:, half]
    n = S - S // 2
    pol = Staged("probe", n, ((step, 1),))
    rand = succ.mean(1)
    out = {"seeds": f"{S // 2}…{S - 1}", "policy": f"best 1 of {n} at step {step + 1}", "random": boot.summary(rand)}
    for name, r in (("seen prompts", seen), ("unseen prompts", oof[:, half])):
        got = simulate(pol, succ, {"probe": {step: r}})
        out[name] = {"success": boot.summary(got), "lift_over_random": boot.summary(got - rand, null=0.0)}
    return out


def study(rd: RunDir, *, seed: int = 0, n_boot: int = 2000, n_splits: int = 5, budgets=None,
          costs_file: Path | None = None, progress: bool = True) -> tuple[dict, list[dict]]:
    """``budgets``: loop iterations per prompt (default: BUDGET_IMAGES × the run's steps, up to every seed)."""
    from ..capture.early import load_early, step_at
    from ..early_stage import image_verdicts
    from ..fit.linear import onehot_constituents
    from ..fit.per_image import design

    arrays, rows, meta = load_early(rd)
    prompts = rd.read_prompts()
    by_id = {p["id"]: p for p in prompts}
    verdicts, deciding, _ = image_verdicts(rd, prompts)
    row_of = {key: i for i, key in enumerate(rows)}
    S = 1 + max(k for _, k in rows)
    layouts = refuse_unless_studiable(rd, prompts, row_of, verdicts, S, n_splits=n_splits, seed=seed)
    T, steps = int(meta["loop_steps"]), list(meta["steps"])
    budgets = budgets or sorted({round(x * T) for x in BUDGET_IMAGES if x <= S})
    onehot, _ = onehot_constituents([by_id[pid] for pid, _ in rows])
    traj, traj_rows = _trajectory(rd, rows)
    head = preregistered.HEADLINE
    head_step = step_at(head["fraction"], T)
    hp = head["policy"]
    head_policy = Staged(head["family"], hp["n_of"], ((head_step, hp["keep"]),), hp["continued"])
    unit = _unit_seconds(costs_file)
    cache = rd.probes_dir / ".selection_cache"
    result: dict = {"loop_steps": T, "seeds_per_prompt": S, "steps": steps, "labels_from": deciding,
                    "preregistered": {**head, "registered_on": preregistered.REGISTERED_ON,
                                      "file_sha256": _file_sha(Path(preregistered.__file__))},
                    "unit_seconds": unit, "categories": {}, "budgets": list(budgets)}
    outcomes: list[dict] = []
    exploration: dict = {}
    for cat in sorted({str(p.get("category")) for p in prompts}):
        lay = layouts[cat]
        why = too_small(lay)
        if why:
            result["categories"][cat] = {"skipped": why}
            continue
        R = Risks(lay, cache, seed=seed, tag=meta["key"])
        scores = scores_for(lay, R, arrays, traj, traj_rows, steps, onehot, progress, loop_steps=T)
        boot = GroupBootstrap(lay.groups, n_boot, seed)
        curve = whole_curve(lay.success, T)
        whole = [Whole(n) for n in range(1, S + 1)]
        policies = whole + [p for name in scores for p in grid(name, sorted(scores[name]), T, S)]
        policy_rows, per = _policy_rows(policies, lay.success, scores, curve, T, boot, unit)
        rand = lay.success.mean(1)
        res: dict = {"n_prompts": lay.shape[0], "n_groups": len(set(lay.groups.tolist())), "dropped": lay.dropped,
                     "failure_rate": float(lay.y_fail.mean()),
                     "whole_images": [{"n": n, "iterations": n * T, **boot.summary(curve[1][:, n - 1])}
                                      for n in range(1, S + 1)],
                     "policies": policy_rows, "auroc": _auroc_table(lay, scores, lay.image_groups, n_boot, seed),
                     "differences": _diffs(lay, scores, n_boot, seed)}
        res["frontiers"] = {fam: frontier([r for r in policy_rows if r["family"] == fam])
                            for fam in dict.fromkeys(r["family"] for r in policy_rows)}
        for i, p in enumerate(policies):
            if isinstance(p, Staged) and p != head_policy:
                exploration[f"{cat} | {p.name}"] = policy_rows[i]["p_gap"]
        if head_step in scores.get("probe", {}):
            Xh = design(arrays, head_step, "probe", slice(None), onehot)
            fits = head_policy.n_of <= S  # the headline scans 6 seeds: a run with fewer per prompt cannot test it
            control = head_policy if fits else Staged("probe", S, ((head_step, 1),))
            res["permutation_control"] = _permutation(lay, R, Xh, head_step, control, boot, seed, n_boot)
            res["seen_vs_unseen"] = _seen_unseen(lay, R, Xh, head_step, scores["probe"][head_step], boot)
            if cat == head["category"]:
                res["headline"] = (_headline(head_policy, lay, scores, curve, T, boot, rand) if fits else
                                   {"skipped": f"the pre-registered policy scans {head_policy.n_of} seeds; this run has "
                                               f"{S} per prompt"})
        # select runs one-rung scans (halving would need the probe's features mid-continuation): simulated only
        runnable = [p for name in RUNNABLE if name in scores
                    for p in grid(name, sorted(scores[name]), T, S, halving=False)]
        Xs = {st: design(arrays, st, "probe", slice(None), onehot) for st in scores.get("probe", {})}
        inner = lambda o: {"probe": {st: R.inner_oof(f"probe-t{st}", X, o) for st, X in Xs.items()}}  # noqa: E731
        res["budgets"] = {}
        for B in budgets:
            got = nested(runnable, B, lay.success, lay.fold_of_prompt, lay.groups, {"probe": scores.get("probe", {})},
                         inner, T, seed=seed)
            w = np.array([on_curve(curve, c)[i] for i, c in enumerate(got["iterations"])])
            res["budgets"][str(B)] = {"chosen": got["chosen"], "success": boot.summary(got["success"]),
                                      "whole_images_at_same_cost": boot.summary(w),
                                      "gap_to_whole": boot.summary(got["success"] - w, null=0.0),
                                      "lift_over_random": boot.summary(got["success"] - rand, null=0.0),
                                      "mean_iterations": float(np.mean(got["iterations"]))}
            if progress:
                print(f"[selection] {cat} budget {B}: {res['budgets'][str(B)]['success']['mean']:.3f} "
                      f"({', '.join(sorted({c['policy'] for c in got['chosen']}))})", file=sys.stderr)
        idx = {p: i for i, p in enumerate(policies)}
        for j, pid in enumerate(lay.prompt_ids):
            for p in whole + runnable:
                outcomes.append({"category": cat, "prompt_id": pid, "group": str(lay.groups[j]),
                                 "policy": p.as_dict(), "iterations": p.cost(T).iterations,
                                 "success": float(per[j, idx[p]])})
        result["categories"][cat] = res
    adj = holm(exploration)
    above, below = [], []
    for cat, res in result["categories"].items():
        for r in res.get("policies", []):
            key = f"{cat} | {r['policy']}"
            if key in adj:
                r["p_gap_holm"] = adj[key]
                if adj[key] < 0.05:
                    (above if r["gap_to_whole"] > 0 else below).append(key)
    result["exploration"] = {"tests": len(adj), "correction": "Holm over every policy's gap to the whole-image "
                             "curve at equal loop iterations, every category (the headline excluded); p from the "
                             "twin-group bootstrap's standard error (normal approximation)",
                             "above_whole_images_after_holm": sorted(above),
                             "below_whole_images_after_holm": sorted(below)}
    return result, outcomes


def refuse_unless_studiable(rd: RunDir, prompts: list[dict], row_of: dict, verdicts: dict, seeds: int, *,
                            n_splits: int = 5, seed: int = 0) -> dict:
    """Every category's layout, or an AuditError (nothing written) when the run has one seed per prompt or no
    category holds the minimum (risks.too_small): the study would be NaN or empty."""
    from ...errors import AuditError

    refusal = seeds_refusal(rd.root, seeds, "the selection study")
    if refusal:
        raise AuditError(refusal)
    layouts = {cat: layout(cat, prompts, row_of, verdicts, seeds, n_splits=n_splits, seed=seed)
               for cat in sorted({str(p.get("category")) for p in prompts})}
    reasons = {cat: too_small(lay) for cat, lay in layouts.items()}
    if all(reasons.values()):
        raise AuditError(f"{rd.root}: no category can be studied — " + "; ".join(
            f"{cat}: {why}" for cat, why in reasons.items()) + ". Make more prompts (a larger --limit, or none) or "
            "more seeds (-n) with the command that made the run, then `t2i-audit probe RUN --early` again")
    return layouts


def preflight(run_dir) -> None:
    """The study's refusals before any work (``select --study --binding`` captures for minutes first)."""
    from ..capture.early import load_early
    from ..early_stage import image_verdicts

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    _, rows, _ = load_early(rd)
    prompts = rd.read_prompts()
    verdicts, _, _ = image_verdicts(rd, prompts)
    refuse_unless_studiable(rd, prompts, {k: i for i, k in enumerate(rows)}, verdicts, 1 + max(k for _, k in rows))


def _headline(policy: Staged, lay, scores, curve, T, boot: GroupBootstrap, rand) -> dict:
    got = simulate(policy, lay.success, scores)
    c = policy.cost(T)
    w = on_curve(curve, c.iterations)
    best4 = curve[1][:, 3] if curve[1].shape[1] >= 4 else None
    out = {"policy": policy.name, "cost": c.as_dict(), "success": boot.summary(got),
           "whole_images_at_same_cost": boot.summary(w), "gap_to_whole": boot.summary(got - w, null=0.0),
           "lift_over_random": boot.summary(got - rand, null=0.0)}
    if best4 is not None:
        out["best_of_4"] = boot.summary(best4)
        out["share_of_best_of_4"] = float(got.mean() / best4.mean())
        out["cost_share_of_best_of_4"] = c.iterations / (4 * T)
    g = out["gap_to_whole"]
    out["verdict"] = ("above the whole-image curve at equal cost (CI excludes 0)" if g["ci"][0] > 0 else
                      "below the whole-image curve at equal cost (CI excludes 0)" if g["ci"][1] < 0 else
                      "not distinguishable from the whole-image curve at equal cost")
    return out


def _trajectory(rd: RunDir, rows: list) -> tuple[dict | None, np.ndarray | None]:
    from .trajectory import load

    if not (rd.activations_dir / "trajectory" / "meta.json").exists():
        return None, None
    arrays, trows, _ = load(rd)
    at = {k: i for i, k in enumerate(trows)}
    if any(k not in at for k in rows):
        return None, None
    return arrays, np.array([at[k] for k in rows])


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(run_dir, *, seed: int = 0, n_boot: int = 2000, n_splits: int = 5, budgets=None,
        costs_file: Path | None = None, progress: bool = True) -> dict:
    from ..early_stage import _clean

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    result, outcomes = study(rd, seed=seed, n_boot=n_boot, n_splits=n_splits, budgets=budgets, costs_file=costs_file,
                             progress=progress)
    rd.probes_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(rd.probes_dir / "selection.json", _clean(result))
    atomic_write_jsonl(rd.probes_dir / "selection_outcomes.jsonl", outcomes)
    return result
