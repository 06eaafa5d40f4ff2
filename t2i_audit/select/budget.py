"""``t2i-audit select --budget B``: run, on fresh seeds, the policy the fitted run's study picks for a budget.

1. **Choice** — per category, from ``probes/selection_outcomes.jsonl`` of the ``--from`` run (written by
   ``select --from RUN --study``): every runnable policy's per-prompt expected success there, restricted to
   prompts that show none of the scored prompts' scenes nor their twins' (``scenes.shares_a_scene``), decided
   by ``choose.decide`` (best mean within B loop iterations; a probe policy only when it clears the margin over
   whole images, else whole images). The choice never sees the prompts it is scored on.
2. **Seeds** — a fresh base seed by default (``freshness``): no scanned seed is an image of the --from run.
3. **Run** — per category, in chunks of prompts: a probe policy scans N seeds to its step in the planned
   batches (``early.replay_batch`` with a snapshot, ``continuation.py``), ranks them with the fitted probe
   (refitted without the scored prompts' scenes and twins under ``holdout``: unseen prompts), and *continues*
   the kept K from their latents. Every scanned seed is continued to the end too, so the baselines are
   expectations over those seeds, never one draw: one random seed (their mean success), and whole images at the
   policy's own cost (the expected best of n over every n-subset of them, linear between n and n + 1 images).
   Whole-image policies generate their n seeds in full. The final judge scores every finished image.
4. **Summary** — ``selection.json``: per category the policy's success, the random seed's, whole images'
   at equal cost, the differences with bootstrap CIs over prompt groups (``scenes.prompt_groups``), the cost
   per prompt in loop iterations / decodes / judge calls (model) beside the denoiser rows counted and the
   seconds measured.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np

from ..errors import AuditError
from ..rundir import RunDir, atomic_write_json, read_jsonl
from .minimums import MIN_PROMPT_GROUPS, seeds_refusal
from .policies import Staged, Whole, policy_from_dict, whole_at
from .rank import n_whole


def choose_for_budget(from_run: Path, budget: float, records: list[dict]) -> dict:
    """category → {policy, fell_back, prompts (how many the choice rested on)}."""
    from ..safeload import read_json
    from ..scenes import prompt_groups, shares_a_scene
    from .choose import decide

    rd = RunDir(from_run)
    path, summary = rd.probes_dir / "selection_outcomes.jsonl", rd.probes_dir / "selection.json"
    if not path.exists() or not summary.exists():
        raise AuditError(f"{path}: no selection study; run `t2i-audit select --from {from_run} --study` first")
    meta = read_json(summary)
    T, S = int(meta["loop_steps"]), int(meta["seeds_per_prompt"])
    refusal = seeds_refusal(from_run, S, "a budget's policy (chosen by its selection study)")
    if refusal:  # a study written before it refused one seed per prompt: its only policy is one random seed
        raise AuditError(f"--budget {budget:g}: {refusal}")
    scored_ids = {p["id"] for p in records}
    shown_now = shares_a_scene(records)  # a prompt of the --from run showing a scored prompt's scene (or its twin's)
    fitted_prompts = {p["id"]: p for p in rd.read_prompts()}
    rows = read_jsonl(path, strict=True)
    out = {}
    for cat in sorted({str(p.get("category")) for p in records}):
        mine = [r for r in rows if r["category"] == cat and r["prompt_id"] not in scored_ids
                and r["prompt_id"] in fitted_prompts and not shown_now(fitted_prompts[r["prompt_id"]])]
        pids = sorted({r["prompt_id"] for r in mine})
        groups = np.array(prompt_groups([fitted_prompts[p] for p in pids]))
        if len(set(groups.tolist())) < MIN_PROMPT_GROUPS:
            raise AuditError(f"--budget: category {cat!r} has {len(pids)} prompts in the --from run's study outside "
                             f"the scenes scored now; the choice needs prompts it is not scored on (≥ {MIN_PROMPT_GROUPS}"
                             " prompt groups): score other prompts (--prompts), or study a larger --from run")
        at = {p: i for i, p in enumerate(pids)}
        per: dict = {}
        for r in mine:
            pol = policy_from_dict(r["policy"])
            per.setdefault(pol, np.full(len(pids), np.nan))[at[r["prompt_id"]]] = r["success"]
        whole = {p.n: v for p, v in per.items() if isinstance(p, Whole)}
        cands = {}
        for p in whole_at(budget, T, S):
            cands[p] = whole[p.n] if isinstance(p, Whole) else (1 - p.t) * whole[p.n] + p.t * whole[p.n + 1]
        cands.update({p: v for p, v in per.items() if isinstance(p, Staged) and len(p.rungs) == 1
                      and p.cost(T).iterations <= budget + 1e-9})
        if not cands:
            raise AuditError(f"--budget {budget}: below one whole image ({T} loop iterations); nothing fits")
        pick, fell_back = decide(cands, groups, T)
        out[cat] = {"policy": pick, "fell_back": fell_back, "prompts": len(pids), "candidates": len(cands),
                    "expected_success_there": float(np.mean(cands[pick]))}
    return out


def refit_without(from_run: Path, fitted: dict, records: list[dict], steps: set[int]) -> tuple[dict, int]:
    """early_probes.json's probes refitted on the --from run's images of prompts that show none of the scored
    prompts' scenes nor their twins' (the prompts are then unseen by the probe); returns (fitted, images left
    out)."""
    from ..probes.capture.early import load_early
    from ..probes.early_stage import image_verdicts
    from ..probes.fit.linear import onehot_constituents
    from ..probes.fit.per_image import design, export_probe
    from ..scenes import prompt_groups, shares_a_scene

    rd = RunDir(from_run)
    arrays, rows, _ = load_early(rd)
    prompts = {p["id"]: p for p in rd.read_prompts()}
    verdicts, _, _ = image_verdicts(rd, list(prompts.values()))
    out = {**fitted, "categories": {c: dict(v) for c, v in fitted["categories"].items()}}
    shown_now = shares_a_scene(records)
    recs = [prompts[pid] for pid, _ in rows]
    onehot, _ = onehot_constituents(recs, fitted["onehot"])
    left_out = 0
    for cat in out["categories"]:
        idx = np.array([i for i, (p, key) in enumerate(zip(recs, rows)) if str(p.get("category")) == cat
                        and key in verdicts and not shown_now(p)])
        left_out += sum(1 for p, key in zip(recs, rows) if str(p.get("category")) == cat and key in verdicts
                        and shown_now(p))
        if len(idx) == 0:
            continue
        y = np.array([not verdicts[rows[i]]["verdict"] for i in idx], dtype=int)
        g = np.array(prompt_groups([recs[i] for i in idx]))
        for step in steps:
            X = design(arrays, step, "probe", idx, onehot[idx])
            out["categories"][cat][f"t{step:03d}"] = export_probe(X, y, g)
    return out, left_out


def expected_iterations(rows: list[dict], loop_steps: int) -> float:
    """The loop iterations the scan rows say were spent: every scanned seed to its scan step, every finished
    one on to the end; whole images in full."""
    total = 0.0
    for r in rows:
        if "scan_step" in r:
            total += r["scan_step"] + 1 + (loop_steps - r["scan_step"] - 1 if r["roles"] else 0)
        else:
            total += loop_steps
    return total


def summarise(rd: RunDir, records: list[dict], rows: list[dict], plan: dict, loop_steps: int, *,
              n_boot: int = 1000, seed: int = 0) -> dict:
    """Per category: the policy's success (the final judge picks among its kept images); for a probe policy the
    expected success of one random seed and of whole images at the policy's cost over the scanned seeds, all
    finished (``whole`` role); paired differences over prompt groups."""
    from ..clusters import GroupBootstrap
    from ..probes.early_stage import image_verdicts
    from ..scenes import prompt_groups
    from .policies import Staged, on_curve, whole_curve

    verdicts, deciding, _ = image_verdicts(rd, records)
    by_id = {p["id"]: p for p in records}
    out: dict = {"labels_from": deciding, "categories": {}}
    for cat, choice in plan.items():
        pids = [p["id"] for p in records if str(p.get("category")) == cat]
        pol = choice["policy"]
        cost = pol.cost(loop_steps).iterations
        vals = {role: np.full(len(pids), np.nan) for role in ("kept", "random", "whole")}
        for i, pid in enumerate(pids):
            mine = [r for r in rows if r["prompt_id"] == pid]
            got = {role: [verdicts.get((pid, r["sample"]), {}).get("verdict") for r in mine if role in r["roles"]]
                   for role in vals}
            for role, v in got.items():
                if v and all(x is not None for x in v):
                    vals[role][i] = float(any(v))
            if isinstance(pol, Staged) and got["whole"] and all(x is not None for x in got["whole"]):
                ok = np.array([[float(bool(x)) for x in got["whole"]]])  # every scanned seed, finished
                vals["random"][i] = ok.mean()
                vals["whole"][i] = on_curve(whole_curve(ok, loop_steps), cost)[0]
        boot = GroupBootstrap(np.array(prompt_groups([by_id[p] for p in pids])), n_boot, seed)
        out["categories"][cat] = {
            "policy": pol.name, "spec": pol.as_dict(), "fell_back_to_whole_images": choice["fell_back"],
            "chosen_on_prompts": choice["prompts"], "expected_success_there": choice["expected_success_there"],
            "cost_per_prompt": pol.cost(loop_steps).as_dict(),
            "success": boot.summary(vals["kept"]), "random_seed": boot.summary(vals["random"]),
            "whole_images_at_same_cost": boot.summary(vals["whole"]),
            "baselines": ("expected over every scanned seed, each finished: one random seed = their mean success; "
                          "whole images = expected best of n over every n-subset (final judge), linear between n "
                          "and n + 1" if isinstance(pol, Staged) else "the policy is whole images itself"),
            "lift_over_random": boot.summary(vals["kept"] - vals["random"], null=0.0),
            "gap_to_whole": boot.summary(vals["kept"] - vals["whole"], null=0.0)}
    return out


def budget_select_run(cfg, from_run: Path, *, budget: float, seed: int | None = None, allow_seen: bool = False,
                      holdout: bool = False, progress: bool = True, n_boot: int = 1000) -> dict:
    """The whole ``select --budget`` command. ``seed``: the base seed (None: the first fresh one)."""
    from ..api import default_run_dir, expand_suites, prepare_run, prompt_digest, recorded_settings, score_stage
    from ..generate import _done_items, load_pipeline, resolve_device
    from ..models import resolve_model
    from ..ownership import claim_output_dir
    from ..rundir import RunLock, atomic_write_jsonl, file_sha256
    from . import freshness
    from .command import resume_argv
    from .execute import CHUNK_PROMPTS, Counter, ScanJournal, Work, run_policies
    from .rank import Roles
    from .scan import load_fitted, scan_settings

    fitted = load_fitted(from_run)
    src = fitted["settings"]
    T = int(src["steps"])
    card = resolve_model(cfg.model)
    if cfg.loras or cfg.components:  # the --from run's LoRAs / components (cli: variants.of_run.for_run), checked
        from ...variants.check import check_variant

        card = check_variant(card, cfg.variant())
    records = expand_suites(cfg.prompts, cfg.limit, 0)
    plan = choose_for_budget(from_run, budget, records)
    n_max = max((max(c["policy"].n_of, int(np.ceil(c["policy"].cost(T).iterations / T)))
                 if isinstance(c["policy"], Staged) else int(np.ceil(c["policy"].cost(T).iterations / T)) + 1)
                for c in plan.values())
    base = seed if seed is not None else freshness.fresh_base_seed(from_run, records, n_max)
    seen = freshness.check(from_run, records, n_max, base, allow_seen=allow_seen)
    steps = {c["policy"].rungs[0][0] for c in plan.values() if isinstance(c["policy"], Staged)}
    left_out = 0
    if holdout and steps:
        fitted, left_out = refit_without(from_run, fitted, records, steps)
    for cat, c in plan.items():
        if isinstance(c["policy"], Staged) and f"t{c['policy'].rungs[0][0]:03d}" not in (fitted["categories"].get(cat) or {}):
            raise AuditError(f"--budget: no fitted probe for {cat!r} at loop step {c['policy'].rungs[0][0]}")
    cfg = cfg.model_copy(update={"seed": base, "steps": T, "guidance": src["guidance"], "size": src["size"],
                                 "dtype": src["dtype"], "images_per_prompt": n_max,
                                 "stages": ["prompts", "generate", "score"]})
    recorded = recorded_settings(cfg.out) if cfg.out else None  # a digest recorded before it covered whole records
    identity = {"model": cfg.model, "prompts": prompt_digest(records, (recorded or {}).get("prompts")),
                "budget": budget, "seed": base,
                "holdout": holdout, "from_probes": f"sha256 {file_sha256(RunDir(from_run).probes_dir / 'early_probes.json')[:16]}",
                "policies": {c: v["policy"].as_dict() for c, v in plan.items()}, **card.adapted.identity()}
    rd = RunDir(cfg.out or default_run_dir(cfg, card, command="select", settings=identity))
    claim_output_dir(rd.root, "run", command="select", settings=identity)
    counter = Counter()
    t_all = time.perf_counter()
    with RunLock(rd.root, 0):
        prepare_run(cfg, card, records, root=rd.root, resume_argv=resume_argv(cfg, from_run, ["--budget", f"{budget:g}",
                                                                            *(["--holdout"] if holdout else [])]))
        s = scan_settings(src, card, base, cfg.batch_size)
        rd.mark_unfinished(rd.images)
        rd.update_stage("generate", status="running", settings=s,
                        selection={"from": str(from_run), "budget": budget, "seed": base, "holdout": holdout})
        pipe = load_pipeline(card, resolve_device(cfg.device), s["dtype"])
        hook = counter.attach(pipe)
        work = [Work(cat, [p for p in records if str(p.get("category")) == cat], c["policy"],
                     Roles(c["policy"], base, T) if isinstance(c["policy"], Staged)
                     else functools.partial(n_whole, c["policy"], seed=base, loop_steps=T))
                for cat, c in plan.items()]
        # a risk depends on the (refitted) probes, the policies, the sampler settings and the scan batches
        made_with = {**identity, **s, "chunk_prompts": CHUNK_PROMPTS}
        try:
            rows = run_policies(rd, pipe, card, work, fitted, s, base, counter,
                                ScanJournal(rd.root / "selection.jsonl", made_with), progress)
        finally:
            hook.remove()
        finished = _done_items(rd)
        atomic_write_jsonl(rd.root / "selection.jsonl", rows)
        rd.update_stage("generate", status="done", images=len(finished))
        t0 = time.perf_counter()
        score_stage(rd, list(card.scorers) or None, {str(p.get("category")) for p in records},
                    device=resolve_device(cfg.device), batch_size=cfg.batch_size, progress=progress, tiny=card.tiny)
        judge_s = time.perf_counter() - t0
        out = summarise(rd, records, rows, plan, T, n_boot=n_boot, seed=base)
        n_judged = sum(1 for r in rows if r["roles"])
        out.update({"mode": "budget", "budget": budget, "from": str(from_run), "loop_steps": T, "base_seed": base,
                    "seeds_seen_by_the_fitted_run": seen, "holdout": holdout,
                    "fitted_images_left_out": left_out,
                    "prompts_seen_by_the_probe": 0 if holdout else sum(
                        1 for p in records if p["id"] in {q["id"] for q in RunDir(from_run).read_prompts()}),
                    "n_prompts": len(records),
                    "spent": {"denoiser_calls": counter.denoiser_calls, "loop_iterations": counter.image_iterations,
                              "loop_iterations_expected": expected_iterations(rows, T), "vae_decodes": counter.decodes,
                              "judge_calls": n_judged,
                              "seconds": {**{k: round(v, 2) for k, v in counter.seconds.items()},
                                          "judge": round(judge_s, 2),
                                          "judge_per_image": round(judge_s / max(n_judged, 1), 4),
                                          "total": round(time.perf_counter() - t_all, 2)},
                              "note": "everything this run spent, the baselines' extra finishing included; the "
                                      "policy's own cost per prompt is cost_per_prompt in each category"}})
        atomic_write_json(rd.root / "selection.json", out)
    return out
