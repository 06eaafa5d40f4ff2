"""``t2i-audit select --of N --keep K --at F``: run N seeds of each prompt to an early step, finish only the K
the probe likes. The one-rung policy "scan N, keep K at loop step s" on every prompt, through the same
execution path as ``select --budget`` (``budget.py``):

1. **Scan** (``scan.py``) — per chunk of prompts (``execute.CHUNK_PROMPTS``, in prompt order), every (prompt,
   sample < N) is replayed in the chunk's planned batches (``generate.plan_batches``) up to the loop step ``s`` of
   ``--at``; its early features go through the per-image probe fitted on an earlier run, and the pipeline's state
   after iteration ``s`` is kept (``continuation.py``). Risks are written to ``selection.jsonl``.
2. **Rank** (``rank.py``) — the K lowest-risk samples of each prompt and (``--baseline``, the default) K samples
   drawn at random per prompt (a seeded draw, the same on every machine).
3. **Continue / finish** (``execute.py``) — the ranked seeds are continued from their scanned latents: ``T − s − 1``
   more iterations each, not ``T`` again. Each image keeps its sample index, hence its seed
   (``generate.image_seed``); its bytes are those of an uninterrupted generation of that seed up to batch-mates:
   they depend on its scan batch and its finish batch (the chunk's finished seeds in order, cut every
   ``batch_size``), both fixed by the settings, so a resumed or healed run ends with the same bytes.
4. **Score and cost** (``cost.py``) — the run's scorers (as ``run`` would choose them); ``selection.json`` reports
   the success of kept vs random images (bootstrap CI over prompt groups) and the cost per prompt: scan
   ``N · (s + 1)`` + finish ``K · (T − s − 1)`` loop iterations, ``K`` decodes, the judge calls, against ``N · T``
   for best-of-N by the final judge, and the seconds measured.

The run folder is an ordinary run (``report``, ``verify``, ``compare`` read it); sample indices of the
images not finished are simply absent.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ..errors import AuditError
from ..rundir import RunDir, atomic_write_json, atomic_write_jsonl


FINISH = "continued from the scan"  # select_identity: how the kept seeds are finished


def selection_summary(rd: RunDir, chosen: list[dict], *, n_of: int, keep: int, step: int, steps: int,
                      n_boot: int = 1000, seed: int = 0) -> dict:
    """Success of kept vs random images per prompt (deciding scorer), bootstrap CI over prompt groups
    (``scenes.prompt_groups``); the cost."""
    from .. import stats
    from ..probes.early_stage import image_verdicts
    from ..scenes import prompt_groups
    from .cost import selection_cost

    prompts = rd.read_prompts()
    group_of = dict(zip((p["id"] for p in prompts), prompt_groups(prompts)))
    verdicts, deciding, _ = image_verdicts(rd, prompts)
    ok = lambda r: verdicts.get((r["prompt_id"], r["sample"]), {}).get("verdict")  # noqa: E731
    by: dict[str, dict[str, list]] = {}
    for r in chosen:
        for role in ("kept", "random"):
            if r.get(role) and ok(r) is not None:
                by.setdefault(r["prompt_id"], {"kept": [], "random": []})[role].append(float(bool(ok(r))))
    pairs = [(np.mean(v["kept"]), np.mean(v["random"]), group_of[pid]) for pid, v in by.items()
             if v["kept"] and v["random"]]
    kept, rand = (np.array([p[i] for p in pairs], float) for i in (0, 1))
    n_prompts = len({r["prompt_id"] for r in chosen})
    out = {"mode": "fixed", "n_of": n_of, "keep": keep, "loop_step": step, "loop_steps": steps, "labels_from": deciding,
           "cost": {**selection_cost(n_of, keep, step, steps), "prompts": n_prompts}}
    if len(pairs) >= 3:
        lo, hi = stats.cluster_bootstrap_ci(lambda a, b: float(np.mean(a - b)), kept, rand,
                                            groups=np.array([p[2] for p in pairs]), n_boot=n_boot, seed=seed)
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
    from ..api import recorded_settings, run_identity
    from ..rundir import file_sha256

    probes = RunDir(from_run).probes_dir / "early_probes.json"
    recorded = recorded_settings(cfg.out) if cfg.out else None
    return {**run_identity(cfg, card, records, recorded), "of": cfg.images_per_prompt, "keep": keep, "at": at,
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
    from ..api import default_run_dir, expand_suites, prepare_run, score_stage
    from ..generate import GenSettings, _done_items, _keep_recorded_plan, load_pipeline, resolve_device
    from ..models import resolve_model
    from ..ownership import claim_output_dir
    from ..rundir import RunLock
    from ..probes.capture.early import step_at
    from .execute import CHUNK_PROMPTS, Counter, ScanJournal, Work, run_policies
    from .freshness import check
    from .policies import Staged
    from .rank import Roles
    from .scan import load_fitted, probe_for, scan_settings

    if not 1 <= keep <= n_of:
        raise AuditError(f"--keep {keep} --of {n_of}: keep between 1 and the number of seeds")
    fitted = load_fitted(from_run)
    src = fitted["settings"]
    card = resolve_model(cfg.model)
    if cfg.loras or cfg.components:  # the --from run's LoRAs / components (cli: variants.of_run.for_run), checked
        from ..variants.check import check_variant

        card = check_variant(card, cfg.variant())
    cfg = cfg.model_copy(update={"images_per_prompt": n_of, "steps": src["steps"], "guidance": src["guidance"],
                                 "size": src["size"], "dtype": src["dtype"], "stages": ["prompts", "generate", "score"]})
    records = expand_suites(cfg.prompts, cfg.limit, 0)  # the subset `run --limit N` takes, whatever the scan's seed
    check(from_run, records, n_of, cfg.seed, allow_seen=allow_seen)  # never re-score the probe's training images
    device = resolve_device(cfg.device)
    step = step_at(at, src["steps"])
    for cat in sorted({str(p.get("category")) for p in records}):
        probe_for(fitted, cat, step)  # every category has a probe at that step, before any work
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
        rd.mark_unfinished(rd.images)
        rd.update_stage("generate", status="running", selection={"from": str(from_run), "of": n_of, "keep": keep,
                                                                  "at": at, "loop_step": step}, settings=s,
                        planned_batch_size=cfg.batch_size)
        pipe = load_pipeline(card, device, s["dtype"])
        policy = Staged("probe", n_of, ((step, keep),))
        # a risk depends on the fitted probe, the step, the sampler settings and the batch it was replayed in
        made_with = {"from_probes": identity["from_probes"], "loop_step": step, "n_of": n_of, "model": cfg.model,
                     "prompts": identity["prompts"], **s, "chunk_prompts": CHUNK_PROMPTS}
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
