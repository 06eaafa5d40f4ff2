"""The selection study: success against cost per category, for every policy and reference, on one run.

Reads a run with S seeds per prompt, final verdicts and per-image early arrays (``probe --early``;
``activations/trajectory`` adds the CFG gap). Per category (prompts whose every seed is judged):

* **curves** — random (one seed), whole images judged by the final judge (best of n, n = 1…S: an **oracle**
  where that judge defines success, as the mini world's pixel judge does), the non-oracle whole-image baseline
  (best of n picked by another scorer of the run, ``mini-judge``: ``select.policies.WholeJudged``), and,
  for each score, every policy of ``select.policies.grid`` (best K of N at a step, successive halving):
  ``probe`` (out-of-fold per-image probe), ``x0`` (the x0 preview judged, unfitted: 1 − share of questions
  passed), ``x0-fitted`` (a probe on the preview's per-question answers: same folds, nested C), ``cfg``
  (CFG-Rejection's accumulated CFG gap, its direction read off the training folds; no probe), and, as
  exploration, ``rawmaps`` (the binding study's slot maps in the relation's frame + one-hot);
  each policy's success with a CI, and its gap to the whole-image curve at the same loop iterations and at the
  same **seconds** (per-unit seconds measured by benchmarks/bench_selection_costs.py: the scan's capture, the
  continuation, decodes and judge calls included); frontiers on both axes;
* **headline** — the pre-registered policy (``preregistered.HEADLINE``), tested alone at α;
* **registered** — the replication's registered policies (``preregistered_replication.POLICIES``: the headline
  and two leads), each with its gap at equal seconds and iterations and the goal (≥ 90 % of best of 4's success
  for ≤ 50 % of its seconds); the leads Holm-corrected together;
* **exploration** — every other policy's gap, Holm-corrected together;
* **budgets** — ``budget.nested`` at each budget: what "choose by inner CV, score on held-out prompts" wins;
* **controls** — the probe fitted on permuted labels, ``PERMUTATIONS`` times: a null distribution of its AUROC
  and of the headline policy's lift, with the real probe's place in it; probe − fitted x0 and probe − x0 AUROC
  at each step;
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
from ...clusters import GroupBootstrap, holm, normal_p
from ...select.choose import nested
from ...select.minimums import seeds_refusal
from ...select.policies import Staged, Whole, WholeJudged, grid, on_curve, simulate, whole_curve
from . import preregistered, preregistered_replication
from .risks import Risks, layout, too_small

BUDGET_IMAGES = (1, 1.5, 1.8, 2, 2.5, 3, 4, 5, 6, 8)  # budgets in whole images' worth of loop iterations
SCORES = ("probe", "x0", "x0-fitted", "cfg", "rawmaps")  # rawmaps: the binding study's best spatial family (exploration)
RUNNABLE = ("probe",)  # scores `select` can rank by (a fitted probe exported per step)
PERMUTATIONS = 20  # shuffles of the labels for the permutation control's null distribution (each one a probe fit)


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


def seconds_curve(curve: tuple[np.ndarray, np.ndarray], T: int, unit: dict) -> tuple[np.ndarray, np.ndarray]:
    """The whole-image curve against measured seconds per prompt (best of n: n images, n judge calls if n > 1)."""
    S = curve[1].shape[1]
    return np.array([Whole(n).seconds(unit, T) for n in range(1, S + 1)]), curve[1]


def _gap_stats(gaps: np.ndarray, boots: np.ndarray) -> dict:
    ok = boots[np.isfinite(boots)]
    mean = float(np.nanmean(gaps)) if np.isfinite(gaps).any() else None
    return {"gap": mean, "ci": [float(x) for x in np.nanquantile(ok, [0.025, 0.975])] if len(ok) else None,
            "p": normal_p(mean, float(ok.std())) if len(ok) and mean is not None else None}


def _policy_rows(policies, success, risks, curve, T, boot: GroupBootstrap, unit: dict | None = None
                 ) -> tuple[list[dict], np.ndarray]:
    per = np.stack([simulate(p, success, risks) for p in policies], axis=1)  # (P, n_policies)
    gaps = np.stack([per[:, i] - on_curve(curve, p.cost(T).iterations) for i, p in enumerate(policies)], axis=1)
    succ_b, gap_b = boot.means(per), boot.means(gaps)
    if unit:  # the same against the whole-image curve at equal measured seconds
        curve_s = seconds_curve(curve, T, unit)
        gaps_s = np.stack([per[:, i] - on_curve(curve_s, p.seconds(unit, T)) for i, p in enumerate(policies)], axis=1)
        gap_sb = boot.means(gaps_s)
    rows = []
    for i, p in enumerate(policies):
        c = p.cost(T)
        g = _gap_stats(gaps[:, i], gap_b[:, i])
        rows.append({"policy": p.name, "family": p.family, "spec": p.as_dict(), "cost": c.as_dict(),
                     "oracle": isinstance(p, Whole) and p.n > 1,
                     "success": float(per[:, i].mean()),
                     "ci": [float(x) for x in np.nanquantile(succ_b[:, i], [0.025, 0.975])],
                     "gap_to_whole": g["gap"], "gap_ci": g["ci"], "p_gap": g["p"]})
        if unit:  # what the user pays: measured seconds (scan capture, continuation, decodes, judge calls)
            gs = _gap_stats(gaps_s[:, i], gap_sb[:, i])
            rows[-1].update({"seconds": p.seconds(unit, T), "iteration_equivalents": p.seconds(unit, T) / unit["iteration"],
                             "gap_to_whole_at_same_seconds": gs["gap"], "gap_seconds_ci": gs["ci"],
                             "p_gap_seconds": gs["p"]})
    return rows, per


def frontier(rows: list[dict], cost=lambda r: r["cost"]["iterations"]) -> list[dict]:
    """The rows not beaten by a cheaper-or-equal row with higher success (upper-left envelope), by ``cost``."""
    out, best = [], -1.0
    for r in sorted(rows, key=lambda r: (cost(r), -r["success"])):
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
                 n_boot: int, observed: np.ndarray, n_perm: int = PERMUTATIONS) -> dict:
    """The probe fitted on labels shuffled across the category's images, judged against the real labels, ``n_perm``
    times: a null distribution of the AUROC and of ``policy``'s lift, and where the real probe (``observed``
    risks) falls in it. The first shuffle keeps its CIs (``auroc``, ``lift_over_random``)."""
    from ... import stats

    y = lay.y_fail
    rand = lay.success.mean(1)
    rng = np.random.default_rng(seed + 1)
    aurocs, lifts, first = [], [], {}
    for k in range(n_perm):
        perm = rng.permutation(y)
        r = R.oof(f"probe-perm-t{step}" if k == 0 else f"probe-perm{k}-t{step}", X, y=perm)
        lift = simulate(policy, lay.success, {"probe": {step: r}}) - rand
        aurocs.append(stats.auroc(y, r.ravel()))
        lifts.append(float(np.nanmean(lift)))
        if k == 0:
            first = {"auroc": stats.auroc_ci(y, r.ravel(), n_boot=n_boot, seed=seed, groups=lay.image_groups),
                     "lift_over_random": boot.summary(lift, null=0.0)}
    real_auc = stats.auroc(y, observed.ravel())
    real_lift = float(np.nanmean(simulate(policy, lay.success, {"probe": {step: observed}}) - rand))

    def null(vals, obs) -> dict:
        v = np.asarray(vals, float)
        return {"observed": obs, "mean": float(v.mean()), "q025": float(np.quantile(v, 0.025)),
                "q975": float(np.quantile(v, 0.975)), "max": float(v.max()),
                "observed_quantile_in_null": float((v < obs).mean()),
                "p": (1 + int((v >= obs).sum())) / (1 + len(v))}
    return {"step": step, "policy": policy.name, **first, "n_shuffles": n_perm,
            "null": {"auroc": null(aurocs, real_auc), "lift_over_random": null(lifts, real_lift),
                     "note": f"{n_perm} probes fitted on labels shuffled across the category's images, each judged "
                             "against the real labels; p = (1 + shuffles at or above the real probe) / (1 + shuffles)"}}


def _seen_unseen(lay, R: Risks, X: np.ndarray, step: int, oof: np.ndarray, boot: GroupBootstrap) -> dict:
    """Seeds S/2…S−1: ranked by a probe that saw the same prompts' other seeds vs one that saw no prompt group."""
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
          costs_file: Path | None = None, progress: bool = True, n_perm: int = PERMUTATIONS) -> tuple[dict, list[dict]]:
    """``budgets``: loop iterations per prompt (default: BUDGET_IMAGES × the run's steps, up to every seed);
    ``n_perm``: label shuffles of the permutation control."""
    from ..capture.early import load_early, step_at
    from ..early_stage import image_verdicts
    from ..fit.linear import onehot_constituents
    from ..fit.per_image import design

    arrays, rows, meta = load_early(rd)
    prompts = rd.read_prompts()
    by_id = {p["id"]: p for p in prompts}
    verdicts, deciding, other_scores = image_verdicts(rd, prompts)
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
    reg = preregistered_replication
    registered = {name: (d, Staged(d["family"], d["n_of"], ((step_at(d["fraction"], T), d["keep"]),), d["continued"]))
                  for name, d in reg.POLICIES.items()}
    result: dict = {"loop_steps": T, "seeds_per_prompt": S, "steps": steps, "labels_from": deciding,
                    "preregistered": {**head, "registered_on": preregistered.REGISTERED_ON,
                                      "file_sha256": _file_sha(Path(preregistered.__file__))},
                    "registration": {"file": "t2i_audit/probes/studies/preregistered_replication.py",
                                     "file_sha256": _file_sha(Path(reg.__file__)), "registered_on": reg.REGISTERED_ON,
                                     "base_seed": reg.BASE_SEED, "policies": reg.POLICIES, "tests": reg.TESTS},
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
        judged = _judge_risks(lay, other_scores)  # the non-oracle whole-image baseline's pickers
        policies = whole + [WholeJudged(n, name.split(":", 1)[1]) for name in judged for n in range(2, S + 1)] + \
            [p for name in scores for p in grid(name, sorted(scores[name]), T, S)]
        scores_all = {**scores, **judged}
        policy_rows, per = _policy_rows(policies, lay.success, scores_all, curve, T, boot, unit)
        rand = lay.success.mean(1)
        res: dict = {"n_prompts": lay.shape[0], "n_groups": len(set(lay.groups.tolist())), "dropped": lay.dropped,
                     "failure_rate": float(lay.y_fail.mean()),
                     "whole_images": [{"n": n, "iterations": n * T, **boot.summary(curve[1][:, n - 1])}
                                      for n in range(1, S + 1)],
                     "policies": policy_rows, "auroc": _auroc_table(lay, scores, lay.image_groups, n_boot, seed),
                     "differences": _diffs(lay, scores, n_boot, seed)}
        res["frontiers"] = {fam: frontier([r for r in policy_rows if r["family"] == fam])
                            for fam in dict.fromkeys(r["family"] for r in policy_rows)}
        if unit:
            res["whole_images_seconds"] = [float(x) for x in seconds_curve(curve, T, unit)[0]]
            res["frontiers_seconds"] = {fam: frontier([r for r in policy_rows if r["family"] == fam],
                                                      cost=lambda r: r["seconds"])
                                        for fam in dict.fromkeys(r["family"] for r in policy_rows)}
        res["registered"] = {name: _registered(pol, lay, scores_all, curve, T, boot, rand_of(lay), unit)
                             for name, (d, pol) in registered.items()
                             if d["category"] == cat and pol.n_of <= S and pol.score in scores
                             and pol.rungs[0][0] in scores[pol.score]}
        for i, p in enumerate(policies):
            if isinstance(p, Staged) and p != head_policy:
                exploration[f"{cat} | {p.name}"] = policy_rows[i]["p_gap"]
        if head_step in scores.get("probe", {}):
            Xh = design(arrays, head_step, "probe", slice(None), onehot)
            fits = head_policy.n_of <= S  # the headline scans 6 seeds: a run with fewer per prompt cannot test it
            control = head_policy if fits else Staged("probe", S, ((head_step, 1),))
            res["permutation_control"] = _permutation(lay, R, Xh, head_step, control, boot, seed, n_boot,
                                                      scores["probe"][head_step], n_perm)
            res["seen_vs_unseen"] = _seen_unseen(lay, R, Xh, head_step, scores["probe"][head_step], boot)
            if cat == head["category"]:
                res["headline"] = (_headline(head_policy, lay, scores, curve, T, boot, rand, unit) if fits else
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
    _holm_leads(result)
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


def rand_of(lay) -> np.ndarray:
    return lay.success.mean(1)


def _verdict(g: dict, what: str) -> str:
    return (f"above the whole-image curve at equal {what} (CI excludes 0)" if g["ci"][0] > 0 else
            f"below the whole-image curve at equal {what} (CI excludes 0)" if g["ci"][1] < 0 else
            f"not distinguishable from the whole-image curve at equal {what}")


def _headline(policy: Staged, lay, scores, curve, T, boot: GroupBootstrap, rand, unit: dict | None = None) -> dict:
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
    out["verdict"] = _verdict(out["gap_to_whole"], "cost")
    if unit:  # the same at equal measured seconds: what the user pays
        sec = policy.seconds(unit, T)
        ws = on_curve(seconds_curve(curve, T, unit), sec)
        out.update({"seconds": sec, "whole_images_at_same_seconds": boot.summary(ws),
                    "gap_to_whole_at_same_seconds": boot.summary(got - ws, null=0.0)})
        out["verdict_seconds"] = _verdict(out["gap_to_whole_at_same_seconds"], "seconds")
        if best4 is not None:
            out["best_of_4_seconds"] = Whole(4).seconds(unit, T)
            out["seconds_share_of_best_of_4"] = sec / out["best_of_4_seconds"]
            out["goal_met"] = bool(out["share_of_best_of_4"] >= 0.9 and out["seconds_share_of_best_of_4"] <= 0.5)
    return out


def _registered(policy: Staged, lay, scores, curve, T, boot: GroupBootstrap, rand, unit: dict | None) -> dict:
    """A registered policy on this run: its success, gaps at equal iterations and seconds, the goal; and its gap to
    the non-oracle whole-image baseline where the run has one."""
    out = {"spec": policy.as_dict(), **_headline(policy, lay, scores, curve, T, boot, rand, unit)}
    got = simulate(policy, lay.success, scores)
    for key in (k for k in scores if k.startswith("judge:")):
        judge = key.split(":", 1)[1]
        S = lay.shape[1]
        ys = np.stack([rand] + [simulate(WholeJudged(n, judge), lay.success, scores) for n in range(2, S + 1)], axis=1)
        if unit:
            xs = np.array([Whole(1).seconds(unit, T)] + [WholeJudged(n, judge).seconds(unit, T) for n in range(2, S + 1)])
            w = on_curve((xs, ys), policy.seconds(unit, T))
            out[f"gap_to_{judge}_picks_at_same_seconds"] = boot.summary(got - w, null=0.0)
        xs_it = np.array([Whole(1).cost(T).iterations] + [WholeJudged(n, judge).cost(T).iterations
                                                          for n in range(2, S + 1)], float)
        w_it = on_curve((xs_it, ys), policy.cost(T).iterations)
        out[f"{judge}_picks_at_same_cost"] = boot.summary(w_it)
        out[f"gap_to_{judge}_picks_at_same_cost"] = boot.summary(got - w_it, null=0.0)
    return out


def _holm_leads(result: dict) -> None:
    """The registered leads (every registered policy but the headline) Holm-corrected together, per their gap at
    equal seconds (at equal iterations where no seconds were measured)."""
    pv = {}
    for cat, res in result["categories"].items():
        for name, r in (res.get("registered") or {}).items():
            if name != "headline":
                g = r.get("gap_to_whole_at_same_seconds") or r["gap_to_whole"]
                pv[f"{cat} | {name}"] = g.get("p")
    adj = holm(pv)
    for cat, res in result["categories"].items():
        for name, r in (res.get("registered") or {}).items():
            if f"{cat} | {name}" in adj:
                r["p_holm_among_leads"] = adj[f"{cat} | {name}"]


def _judge_risks(lay, other_scores: dict) -> dict:
    """``{"judge:<scorer>": {"final": (P, S)}}``: minus each other scorer's value of every finished image (NaN where
    it has none: never picked), for the non-oracle whole-image baseline."""
    out = {}
    for name, vals in sorted(other_scores.items()):
        v = np.array([[vals.get((pid, k), np.nan) for k in range(lay.shape[1])] for pid in lay.prompt_ids], float)
        if np.isfinite(v).any():
            out[f"judge:{name}"] = {"final": np.where(np.isfinite(v), -v, np.inf)}
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
        costs_file: Path | None = None, progress: bool = True, n_perm: int = PERMUTATIONS) -> dict:
    from ..early_stage import _clean

    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    result, outcomes = study(rd, seed=seed, n_boot=n_boot, n_splits=n_splits, budgets=budgets, costs_file=costs_file,
                             progress=progress, n_perm=n_perm)
    rd.probes_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(rd.probes_dir / "selection.json", _clean(result))
    atomic_write_jsonl(rd.probes_dir / "selection_outcomes.jsonl", outcomes)
    return result
