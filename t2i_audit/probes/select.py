"""``t2i-audit select``: run N seeds of each prompt to an early step, finish only the K the probe likes.

One execution path with ``select --budget`` (``studies/budget_exec.py``): ``--of N --keep K --at F`` is the
one-rung policy "scan N, keep K at loop step s" run on every prompt.

1. **Scan** — per chunk of prompts (``budget_exec.CHUNK_PROMPTS``, in prompt order), every (prompt, sample < N)
   is replayed in the chunk's planned batches (``generate.plan_batches``) up to the loop step ``s`` of ``--at``;
   its early features go through the per-image probe fitted on an earlier run (``--from RUN``:
   ``probes/early_probes.json``, written by ``t2i-audit probe RUN --early``), and the pipeline's state after
   iteration ``s`` is kept (``studies/continuation.py``). Risks are written to ``selection.jsonl``.
2. **Finish** — the K lowest-risk samples of each prompt and (``--baseline``, the default) K samples drawn at
   random per prompt (a seeded draw, the same on every machine) are **continued** from their scanned latents:
   ``T − s − 1`` more iterations each, not ``T`` again. Each image keeps its sample index, hence its seed
   (``generate.image_seed``); its bytes are those of an uninterrupted generation of that seed up to batch-mates:
   they depend on its scan batch and its finish batch (the chunk's finished seeds in order, cut every
   ``batch_size``), both fixed by the settings, so a resumed or healed run ends with the same bytes.
3. **Score** — the run's scorers (as ``run`` would choose them); ``selection.json`` reports the success of
   kept vs random images (bootstrap CI over prompts) and the cost per prompt as ``studies/costs.py`` counts
   it: scan ``N · (s + 1)`` + finish ``K · (T − s − 1)`` loop iterations, ``K`` decodes, the judge calls,
   against ``N · T`` for best-of-N by the final judge.

The run folder is an ordinary run (``report``, ``verify``, ``compare`` read it); sample indices of the
images not finished are simply absent.
"""

from __future__ import annotations

import hashlib
import random
import sys
from pathlib import Path

import numpy as np

from ..errors import AuditError
from ..rundir import RunDir, atomic_write_json, atomic_write_jsonl


FINISH = "continued from the scan"  # select_identity: how the kept seeds are finished


def load_fitted(from_run: Path) -> dict:
    """The --from run's per-image probes, validated (:mod:`.probe_files`)."""
    from .probe_files import load_early_probes

    return load_early_probes(from_run)


def _probe_for(fitted: dict, category: str, step: int) -> dict:
    cat = (fitted.get("categories") or {}).get(category)
    if not cat:
        have = ", ".join(sorted(fitted.get("categories") or {})) or "none"
        raise AuditError(f"no per-image probe for category {category!r} in the --from run (have: {have})")
    tag = f"t{step:03d}"
    if tag not in cat:
        raise AuditError(f"--at: the --from run's probes are at loop steps {sorted(cat)}, not {tag}")
    return cat[tag]


def scan_settings(fitted_settings: dict, card, seed: int, batch_size: int) -> dict:
    """The sampler settings the probes were fitted under (steps, guidance, size, dtype), with this run's seed
    and batch size: a probe read at step k of 20 means nothing at step k of 30."""
    return {**{k: fitted_settings[k] for k in ("steps", "guidance", "size", "dtype")},
            "seed": seed, "batch_size": batch_size, "call": dict(card.call)}


def random_picks(prompt_id: str, n_of: int, keep: int, seed: int) -> list[int]:
    """K of the N samples, drawn from a generator seeded by (prompt id, seed): the same everywhere."""
    digest = int(hashlib.sha256(f"{prompt_id}:random:{seed}".encode()).hexdigest()[:15], 16)
    return sorted(random.Random(digest).sample(range(n_of), keep))


def scan_record(p: dict, sample: int, seed: int, risk: float) -> dict:
    """One scanned candidate as ``selection.jsonl`` and ``predict --early`` write it."""
    return {"prompt_id": p["id"], "sample": sample, "seed": seed, "risk": risk, "category": p.get("category"),
            "text": p["text"]}


def batch_risks(pipe, batch: list[tuple[dict, int]], seeds: list[int], fitted: dict, s: dict, step: int,
                extra=()) -> list[float]:
    """The fitted probe's risk of each member of one planned batch, replayed to loop index ``step`` (``extra``:
    more recorders for the replay, e.g. the continuation snapshot)."""
    from .capture.early import replay_batch
    from .fit.linear import onehot_constituents
    from .fit.per_image import apply_probe, design

    arrays = replay_batch(pipe, batch, seeds, s, [step], previews=False, extra=extra)
    X = design(arrays, step, "probe", slice(None), onehot_constituents([p for p, _ in batch], fitted["onehot"])[0])
    return [float(apply_probe(_probe_for(fitted, str(p.get("category")), step), X[j:j + 1])[0])
            for j, (p, _) in enumerate(batch)]


def scan(path: Path, pipe, prompts: list[dict], fitted: dict, s: dict, *, n_of: int, step: int,
         progress: bool) -> list[dict]:
    """``predict --early``: the risk of every (prompt, sample < n_of) at ``step``, nothing finished; ``path``
    (JSONL) replaced batch by batch."""
    from ..generate import image_seed, plan_batches

    plan = plan_batches(prompts, n_of, s["batch_size"])
    out = []
    for b, batch in enumerate(plan):
        seeds = [image_seed(p["id"], k, s["seed"]) for p, k in batch]
        risks = batch_risks(pipe, batch, seeds, fitted, s, step)
        out += [scan_record(p, k, x, r) for (p, k), x, r in zip(batch, seeds, risks)]
        atomic_write_jsonl(path, out)  # whole batches only: a kill loses at most this batch
        if progress:
            print(f"[select] scanned batch {b + 1}/{len(plan)}", file=sys.stderr)
    return out


def scan_only(model: str, prompts: list[dict], from_run: Path, out: Path, *, n_of: int, at: float, seed: int = 0,
              batch_size: int = 4, device: str = "cpu", progress: bool = True, variant=None) -> list[dict]:
    """``predict --early``: the risk of each of N seeds of each prompt after the early steps, nothing finished
    (``variant``: the --from run's LoRAs / components, t2i_audit.variants)."""
    from ..generate import load_pipeline, resolve_device
    from ..models import resolve_model
    from .capture.early import step_at

    fitted = load_fitted(from_run)
    src = fitted["settings"]
    step = step_at(at, src["steps"])
    for cat in sorted({str(p.get("category")) for p in prompts}):
        _probe_for(fitted, cat, step)
    card = resolve_model(model).with_variant(variant)
    s = scan_settings(src, card, seed, batch_size)
    pipe = load_pipeline(card, resolve_device(device), s["dtype"])
    # no resume: `out` is a file the user named (claimed with --force if it existed), replaced, never read back
    return scan(out, pipe, prompts, fitted, s, n_of=n_of, step=step, progress=progress)


def selection_cost(n_of: int, keep: int, step: int, steps: int) -> dict:
    """What "scan N to loop index s, continue the best K" spends per prompt, as ``studies/costs.py`` counts it,
    against best-of-N whole images judged by the final judge."""
    from .studies.costs import staged, whole_images

    spent, full = staged(n_of, [(step, keep)], steps), whole_images(n_of, steps)
    scan_cost = n_of * (step + 1)
    return {"unit": "per prompt: denoiser loop iterations (classifier-free guidance batched: one call each), VAE "
                    "decodes, judge calls; the random seeds finished beside (--baseline) measure the lift and are "
                    "not the policy's cost",
            "scan": scan_cost, "finish": spent.iterations - scan_cost, "selected_total": spent.iterations,
            "decodes": spent.decodes, "judge_calls": spent.judge_calls,
            "regenerated_instead": scan_cost + keep * steps,  # what finishing the kept seeds from noise would cost
            "best_of_n_by_final_judge": full.iterations, "best_of_n": full.as_dict(),
            "saved_fraction": 1 - spent.iterations / full.iterations}


def selection_summary(rd: RunDir, chosen: list[dict], *, n_of: int, keep: int, step: int, steps: int,
                      n_boot: int = 1000, seed: int = 0) -> dict:
    """Success of kept vs random images per prompt (deciding scorer), bootstrap CI; the cost."""
    from .. import stats
    from .early_stage import image_verdicts

    verdicts, deciding, _ = image_verdicts(rd, rd.read_prompts())
    ok = lambda r: verdicts.get((r["prompt_id"], r["sample"]), {}).get("verdict")  # noqa: E731
    by: dict[str, dict[str, list]] = {}
    for r in chosen:
        for role in ("kept", "random"):
            if r.get(role) and ok(r) is not None:
                by.setdefault(r["prompt_id"], {"kept": [], "random": []})[role].append(float(bool(ok(r))))
    pairs = [(np.mean(v["kept"]), np.mean(v["random"])) for v in by.values() if v["kept"] and v["random"]]
    kept, rand = (np.array([p[i] for p in pairs]) for i in (0, 1))
    n_prompts = len({r["prompt_id"] for r in chosen})
    out = {"mode": "fixed", "n_of": n_of, "keep": keep, "loop_step": step, "loop_steps": steps, "labels_from": deciding,
           "cost": {**selection_cost(n_of, keep, step, steps), "prompts": n_prompts}}
    if len(pairs) >= 3:
        lo, hi = stats.bootstrap_ci(lambda a, b: float(np.mean(a - b)), kept, rand, n_resamples=n_boot, seed=seed)
        out.update({"n_prompts": len(pairs), "kept_success": float(kept.mean()), "random_success": float(rand.mean()),
                    "lift": float((kept - rand).mean()), "ci": [lo, hi]})
    else:
        out["n_prompts"] = len(pairs)
    return out


def select_identity(cfg, card, records: list[dict], from_run: Path, *, keep: int, at: float, baseline: bool) -> dict:
    """What a select run's folder holds is determined by (ownership.py; its default name hashes it): the run's
    resolved settings and prompts, --of (unlike `run -n`, it changes which seeds are kept), the --from run's
    fitted probes by content, --keep, --at, --baseline, and how kept seeds are finished (continued from the
    scan: a folder whose images were regenerated from noise holds other bytes). Not the batch size (a resume
    keeps the planned one) nor the device."""
    from ..api import run_identity
    from ..rundir import file_sha256

    probes = RunDir(from_run).probes_dir / "early_probes.json"
    return {**run_identity(cfg, card, records), "of": cfg.images_per_prompt, "keep": keep, "at": at,
            "baseline": baseline, "from_probes": f"sha256 {file_sha256(probes)[:16]}", "finish": FINISH}


def resume_argv(cfg, from_run: Path, policy: list[str]) -> list[str]:
    """The select command (without --out) that continues this run, ``policy`` being its policy options
    (``--of … --keep … --at …`` or ``--budget …``): what `verify` advises after a kill (a `run --config
    RUN/run.yaml` would generate every seed in full). Paths absolute: it may be run from anywhere."""
    from ..suite import resolve_suite_path

    # a shipped suite's bare name (`--prompts mini`) stays a name: it is found from any folder, a path is not
    prompts = [a for p in cfg.prompts
               for a in ("--prompts", str(p) if resolve_suite_path(p) != Path(p) else str(Path(p).resolve()))]
    return ["select", "--from", str(Path(from_run).resolve()), "--model", cfg.model, *prompts,
            *(["--limit", str(cfg.limit)] if cfg.limit else []), *policy, "--seed", str(cfg.seed),
            "--batch-size", str(cfg.batch_size)]


def select_run(cfg, from_run: Path, *, n_of: int, keep: int, at: float, baseline: bool = True,
               progress: bool = True, n_boot: int = 1000, allow_seen: bool = False) -> dict:
    """The whole command: lay out the run, scan, choose, continue, score, summarise."""
    from ..api import default_run_dir, expand_suites, prepare_run, prompt_digest, score_stage
    from ..generate import GenSettings, _done_items, _keep_recorded_plan, load_pipeline, resolve_device
    from ..models import resolve_model
    from ..ownership import claim_output_dir
    from ..rundir import RunLock
    from .capture.early import step_at
    from .studies.budget_exec import CHUNK_PROMPTS, Counter, Roles, ScanJournal, Work, run_policies
    from .studies.selection import Staged

    if not 1 <= keep <= n_of:
        raise AuditError(f"--keep {keep} --of {n_of}: keep between 1 and the number of seeds")
    fitted = load_fitted(from_run)
    src = fitted["settings"]
    card = resolve_model(cfg.model)
    if cfg.loras or cfg.components:  # the --from run's LoRAs / components (cli: variants.for_run), checked
        from ..variants.check import check_variant

        card = check_variant(card, cfg.variant())
    cfg = cfg.model_copy(update={"images_per_prompt": n_of, "steps": src["steps"], "guidance": src["guidance"],
                                 "size": src["size"], "dtype": src["dtype"], "stages": ["prompts", "generate", "score"]})
    records = expand_suites(cfg.prompts, cfg.limit, cfg.seed)
    from .studies.freshness import check

    check(from_run, records, n_of, cfg.seed, allow_seen=allow_seen)  # never re-score the probe's training images
    device = resolve_device(cfg.device)
    step = step_at(at, src["steps"])
    for cat in sorted({str(p.get("category")) for p in records}):
        _probe_for(fitted, cat, step)  # every category has a probe at that step, before any work
    identity = select_identity(cfg, card, records, from_run, keep=keep, at=at, baseline=baseline)
    rd = RunDir(cfg.out or default_run_dir(cfg, card, command="select", settings=identity))
    # a new or empty folder, or a select run with these settings: never a plain run's folder (its images would go)
    claim_output_dir(rd.root, "run", command="select", settings=identity)
    with RunLock(rd.root, 0):
        # the batches were planned once: a resume with another --batch-size keeps them (as `run` does)
        planned, note = _keep_recorded_plan(rd, GenSettings(steps=src["steps"], guidance=src["guidance"],
                                                            size=src["size"], dtype=src["dtype"],
                                                            batch_size=cfg.batch_size))
        if note and progress:
            print(f"[select] {note}", file=sys.stderr)
        cfg = cfg.model_copy(update={"batch_size": planned.batch_size})
        prepare_run(cfg, card, records, root=rd.root,
                    resume_argv=resume_argv(cfg, from_run, ["--of", str(n_of), "--keep", str(keep), "--at", str(at),
                                                          *([] if baseline else ["--no-baseline"])]))
        s = scan_settings(src, card, cfg.seed, cfg.batch_size)
        rd.update_stage("generate", status="running", selection={"from": str(from_run), "of": n_of, "keep": keep,
                                                                  "at": at, "loop_step": step}, settings=s,
                        planned_batch_size=cfg.batch_size)
        pipe = load_pipeline(card, device, s["dtype"])
        policy = Staged("probe", n_of, ((step, keep),))
        # a risk depends on the fitted probe, the step, the sampler settings and the batch it was replayed in
        made_with = {"from_probes": identity["from_probes"], "loop_step": step, "n_of": n_of, "model": cfg.model,
                     "prompts": prompt_digest(records), **s, "chunk_prompts": CHUNK_PROMPTS}
        counter, before = Counter(), _done_items(rd)
        hook = counter.attach(pipe)
        try:
            rows = run_policies(rd, pipe, card, [Work("scan and finish", records, policy, Roles(
                policy, cfg.seed, src["steps"], random_k=keep if baseline else 0, whole=False))], fitted, s, cfg.seed,
                counter, ScanJournal(rd.root / "selection.jsonl", made_with), progress)
        finally:
            hook.remove()
        chosen = [{**{k: v for k, v in r.items() if k not in ("roles", "scan_step")}, "kept": "kept" in r["roles"],
                   "random": "random" in r["roles"]} for r in rows]
        atomic_write_jsonl(rd.root / "selection.jsonl", chosen)
        rd.update_stage("generate", status="done", images=sum(1 for r in chosen if r["kept"] or r["random"]),
                        generated_now=len(set(_done_items(rd)) - set(before)), planned_batch_size=cfg.batch_size,
                        spent_now=counter.as_dict())
        score_stage(rd, list(card.scorers) or None, {r["category"] for r in records}, device=device,
                    batch_size=cfg.batch_size, progress=progress, tiny=card.tiny)
        summary = selection_summary(rd, chosen, n_of=n_of, keep=keep, step=step, steps=src["steps"], n_boot=n_boot,
                                    seed=cfg.seed)
        summary.update({"from": str(from_run), "at": at, "baseline": baseline})
        atomic_write_json(rd.root / "selection.json", summary)
    return summary
