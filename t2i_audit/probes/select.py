"""``t2i-audit select``: run N seeds of each prompt to an early step, finish only the K the probe likes.

1. **Scan** — every (prompt, sample < N) is replayed in planned batches (``generate.plan_batches``
   over N samples) up to the loop step of ``--at`` and its early features go through the per-image
   probe fitted on an earlier run (``--from RUN``: ``probes/early_probes.json``, written by
   ``t2i-audit probe RUN --early``). Risks are written to ``selection.jsonl``.
2. **Finish** — the K lowest-risk samples of each prompt are generated in full, and (``--baseline``,
   the default) K samples drawn at random per prompt (a seeded draw, the same on every machine), so
   the run measures what selection bought on the same prompts, judge and seeds. Each image keeps its
   sample index, hence its seed (``generate.image_seed``): it is the image a full run would make of
   that seed, up to batch-mates (its bytes depend on the finish batches, cut from the kept list in
   prompt order every ``batch_size``).
3. **Score** — the run's scorers (as ``run`` would choose them); ``selection.json`` reports the
   success of kept vs random images (bootstrap CI over prompts) and the cost in denoiser loop
   iterations: scan ``N · (step + 1)`` + finish ``K · steps`` against ``N · steps`` for best-of-N by
   the final judge.

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
from ..resume import reusable_records, stamped
from ..rundir import RunDir, atomic_write_json, atomic_write_jsonl


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


def scan(path: Path, pipe, prompts: list[dict], fitted: dict, s: dict, *, n_of: int, step: int,
         progress: bool, resume: dict | None = None) -> list[dict]:
    """Risk of every (prompt, sample < n_of) from its features at ``step``, written to ``path`` (JSONL) batch by
    batch. ``resume``: the settings every risk depends on; records of ``path`` made with exactly these are
    reused, anything else in it is scanned again (:mod:`t2i_audit.resume`). None: ``path`` is replaced."""
    from ..generate import image_seed, plan_batches
    from .early import replay_batch
    from .linear import onehot_constituents
    from .per_image import apply_probe, design

    done = reusable_records(path, resume, lambda r: (r["prompt_id"], int(r["sample"]))) if resume else {}
    plan = plan_batches(prompts, n_of, s["batch_size"])
    out = []
    for b, batch in enumerate(plan):
        if all((p["id"], k) in done for p, k in batch):
            out += [done[(p["id"], k)] for p, k in batch]
            continue
        seeds = [image_seed(p["id"], k, s["seed"]) for p, k in batch]
        arrays = replay_batch(pipe, batch, seeds, s, [step], previews=False)
        recs = [p for p, _ in batch]
        X = design(arrays, step, "probe", slice(None), onehot_constituents(recs, fitted["onehot"])[0])
        made = []
        for j, (p, k) in enumerate(batch):
            risk = float(apply_probe(_probe_for(fitted, str(p.get("category")), step), X[j:j + 1])[0])
            made.append({"prompt_id": p["id"], "sample": k, "seed": seeds[j], "risk": risk,
                         "category": p.get("category"), "text": p["text"]})
        out += stamped(made, resume) if resume else made
        atomic_write_jsonl(path, out)  # whole batches only: a kill loses at most this batch
        if progress:
            print(f"[select] scanned batch {b + 1}/{len(plan)}", file=sys.stderr)
    return out


def scan_only(model: str, prompts: list[dict], from_run: Path, out: Path, *, n_of: int, at: float, seed: int = 0,
              batch_size: int = 4, device: str = "cpu", progress: bool = True) -> list[dict]:
    """``predict --early``: the risk of each of N seeds of each prompt after the early steps, nothing finished."""
    from ..generate import load_pipeline, resolve_device
    from ..models import resolve_model
    from .early import step_at

    fitted = load_fitted(from_run)
    src = fitted["settings"]
    step = step_at(at, src["steps"])
    for cat in sorted({str(p.get("category")) for p in prompts}):
        _probe_for(fitted, cat, step)
    card = resolve_model(model)
    s = scan_settings(src, card, seed, batch_size)
    pipe = load_pipeline(card, resolve_device(device), s["dtype"])
    # no resume: `out` is a file the user named (claimed with --force if it existed), replaced, never read back
    return scan(out, pipe, prompts, fitted, s, n_of=n_of, step=step, progress=progress)


def choose(scanned: list[dict], *, n_of: int, keep: int, seed: int, baseline: bool) -> list[dict]:
    """Mark each candidate kept / random (both possible); ties in risk go to the lower sample index."""
    by: dict[str, list[dict]] = {}
    for r in scanned:
        by.setdefault(r["prompt_id"], []).append(r)
    for pid, rows in by.items():
        rows.sort(key=lambda r: r["sample"])
        kept = {r["sample"] for r in sorted(rows, key=lambda r: (r["risk"], r["sample"]))[:keep]}
        rand = set(random_picks(pid, n_of, keep, seed)) if baseline else set()
        for r in rows:
            r["kept"], r["random"] = r["sample"] in kept, r["sample"] in rand
    return scanned


def finish(rd: RunDir, pipe, card, prompts: list[dict], chosen: list[dict], s: dict, progress: bool) -> int:
    """Generate every kept / random sample in full, in batches cut from that list; resumable."""
    import torch

    from ..generate import _done_items, _write_batch, output_images, pipeline_call_kwargs

    by_id = {p["id"]: p for p in prompts}
    todo = [(by_id[r["prompt_id"]], r["sample"], r["seed"]) for r in chosen if r["kept"] or r["random"]]
    done = _done_items(rd)
    made = 0
    for i in range(0, len(todo), s["batch_size"]):
        batch = todo[i:i + s["batch_size"]]
        if all((p["id"], k) in done for p, k, _ in batch):
            continue
        gens = [torch.Generator("cpu").manual_seed(int(seed)) for _, _, seed in batch]
        kwargs, _ = pipeline_call_kwargs(type(pipe), [p["text"] for p, _, _ in batch], gens, steps=s["steps"],
                                         guidance=s["guidance"], size=s["size"], output_type="np", call=card.call)
        images = output_images(pipe(**kwargs))
        keep = [j for j, (p, k, _) in enumerate(batch) if (p["id"], k) not in done]
        _write_batch(rd, card, [(batch[j][0], batch[j][1]) for j in keep], [batch[j][2] for j in keep],
                     [images[j] for j in keep], [False] * len(keep), 0.0, 0, s["size"],
                     batch_info={"batch": i // s["batch_size"], "finish_batch": True})
        made += len(keep)
        if progress:
            print(f"[select] finished {min(i + s['batch_size'], len(todo))}/{len(todo)}", file=sys.stderr)
    records = _done_items(rd)
    order = [(p["id"], k) for p, k, _ in todo]
    atomic_write_jsonl(rd.images, [records[key] for key in order if key in records])
    return made


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
    scan_cost, finish_cost, full = n_of * (step + 1), keep * steps, n_of * steps
    out = {"n_of": n_of, "keep": keep, "loop_step": step, "loop_steps": steps, "labels_from": deciding,
           "cost": {"unit": "denoiser loop iterations per prompt (classifier-free guidance batched: one call each)",
                    "scan": scan_cost, "finish": finish_cost, "selected_total": scan_cost + finish_cost,
                    "best_of_n_by_final_judge": full, "saved_fraction": 1 - (scan_cost + finish_cost) / full,
                    "prompts": n_prompts}}
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
    fitted probes by content, --keep, --at and --baseline. Not the batch size (a resume keeps the planned
    one) nor the device."""
    from ..api import run_identity
    from ..rundir import file_sha256

    probes = RunDir(from_run).probes_dir / "early_probes.json"
    return {**run_identity(cfg, card, records), "of": cfg.images_per_prompt, "keep": keep, "at": at,
            "baseline": baseline, "from_probes": f"sha256 {file_sha256(probes)[:16]}"}


def resume_argv(cfg, from_run: Path, policy: list[str]) -> list[str]:
    """The select command (without --out) that continues this run, ``policy`` being its policy options
    (``--of … --keep … --at …`` or ``--budget …``): what `verify` advises after a kill (a `run --config
    RUN/run.yaml` would generate every seed in full). Paths absolute: it may be run from anywhere."""
    prompts = [a for p in cfg.prompts for a in ("--prompts", str(Path(p).resolve()))]
    return ["select", "--from", str(Path(from_run).resolve()), "--model", cfg.model, *prompts,
            *(["--limit", str(cfg.limit)] if cfg.limit else []), *policy, "--seed", str(cfg.seed),
            "--batch-size", str(cfg.batch_size)]


def select_run(cfg, from_run: Path, *, n_of: int, keep: int, at: float, baseline: bool = True,
               progress: bool = True, n_boot: int = 1000, allow_seen: bool = False) -> dict:
    """The whole command: lay out the run, scan, choose, finish, score, summarise."""
    from ..api import default_run_dir, expand_suites, prepare_run, prompt_digest, score_stage
    from ..generate import GenSettings, _keep_recorded_plan, load_pipeline, resolve_device
    from ..models import resolve_model
    from ..ownership import claim_output_dir
    from ..rundir import RunLock
    from .early import step_at

    if not 1 <= keep <= n_of:
        raise AuditError(f"--keep {keep} --of {n_of}: keep between 1 and the number of seeds")
    fitted = load_fitted(from_run)
    src = fitted["settings"]
    card = resolve_model(cfg.model)
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
        # a risk depends on the fitted probe, the step, the sampler settings and the batch it was replayed in
        made_with = {"from_probes": identity["from_probes"], "loop_step": step, "n_of": n_of, "model": cfg.model,
                     "prompts": prompt_digest(records), **s}
        scanned = scan(rd.root / "selection.jsonl", pipe, records, fitted, s, n_of=n_of, step=step, progress=progress,
                       resume=made_with)
        chosen = choose(scanned, n_of=n_of, keep=keep, seed=cfg.seed, baseline=baseline)
        atomic_write_jsonl(rd.root / "selection.jsonl", chosen)
        made = finish(rd, pipe, card, records, chosen, s, progress)
        rd.update_stage("generate", status="done", images=sum(1 for r in chosen if r["kept"] or r["random"]),
                        generated_now=made, planned_batch_size=cfg.batch_size)
        score_stage(rd, list(card.scorers) or None, {r["category"] for r in records}, device=device,
                    batch_size=cfg.batch_size, progress=progress, tiny=card.tiny)
        summary = selection_summary(rd, chosen, n_of=n_of, keep=keep, step=step, steps=src["steps"], n_boot=n_boot,
                                    seed=cfg.seed)
        summary.update({"from": str(from_run), "at": at, "baseline": baseline})
        atomic_write_json(rd.root / "selection.json", summary)
    return summary
