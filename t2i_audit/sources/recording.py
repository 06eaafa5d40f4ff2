"""What a source without a pipeline records beside its images: which (prompt, sample) are done, which the provider
refused, and the generate stage's counts — shared by hosted models (hosted.py) and a lab's sampler (callable.py).

An image is done when its record's file is on disk with the recorded bytes (generate.py ``_done_items``, the rule a
pipeline's resume uses); a refusal is done when ``refusals.jsonl`` holds it. A resumed run asks for neither again:
a killed run costs only the requests that were in flight. To ask again for refused images, remove refusals.jsonl.
"""

from __future__ import annotations

from typing import Iterable, Optional

from ..records import read_records
from ..rundir import RunDir, append_jsonl, repair_jsonl

REFUSALS = "refusals.jsonl"  # records.py RECORD_KINDS["refusals"]


def refusals_path(run: RunDir):
    return run.root / REFUSALS


def recorded_refusals(run: RunDir) -> dict[tuple[str, int], dict]:
    """The refusals recorded in the run, by (prompt id, sample); each record checked (records.py)."""
    return {(r["prompt_id"], r["sample"]): r for r in read_records(refusals_path(run), "refusals")}


def record_refusal(run: RunDir, model: str, req, reason: str, detail: str, status: Optional[int] = None) -> dict:
    """Append one refusal (``content_filter`` or ``not_an_image``) of ``req`` (an ImageRequest)."""
    rec = {"prompt_id": req.prompt_id, "sample": req.sample, "seed": req.seed, "reason": reason,
           "detail": " ".join(str(detail).split())[:300], "model": model,
           **({"status": int(status)} if status is not None else {})}
    append_jsonl(refusals_path(run), [rec])
    return rec


def pending(run: RunDir, requests: Iterable, rank: int = 0) -> tuple[list, int, int]:
    """(the requests still to ask, how many are done, how many were refused) — torn last lines of a killed run's
    shard and refusals dropped first."""
    from ..generate import _done_items

    repair_jsonl(run.image_shard(rank))
    repair_jsonl(refusals_path(run))
    done, refused = _done_items(run), recorded_refusals(run)
    todo, n_done, n_refused = [], 0, 0
    for req in requests:
        key = (req.prompt_id, req.sample)
        if key in done:
            n_done += 1
        elif key in refused:
            n_refused += 1
        else:
            todo.append(req)
    return todo, n_done, n_refused


def finish_stage(run: RunDir, prompts: list[dict], images_per_prompt: int, *, made_now: int, **extra) -> dict:
    """Merge the shard into images.jsonl and record the stage's counts: a refused image is not missing (it was
    answered, and is counted apart), so a run whose every image is made or refused is done."""
    from ..generate import _done_items, merge_shards

    counts = merge_shards(run, prompts, images_per_prompt, made_now=made_now)
    done = _done_items(run)
    order = {(p["id"], k) for p in prompts for k in range(images_per_prompt)}
    refused = {key: r for key, r in recorded_refusals(run).items() if key in order and key not in done}
    reasons: dict[str, int] = {}
    for r in refused.values():
        reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    missing = counts["missing"] - len(refused)
    counts.update(missing=missing, refused=len(refused), refused_by_reason=reasons,
                  status="done" if missing == 0 else "incomplete", **extra)
    run.update_stage("generate", **counts)
    return counts


def refusal_summary(run: RunDir) -> dict:
    """``{"n": N, "by_reason": {...}, "examples": [...]}`` of a run's refusals (reports: counted apart from
    composition failures, never scored)."""
    if not refusals_path(run).exists():  # a pipeline's run, or a source that refused nothing: nothing to read
        return {"n": 0, "by_reason": {}, "examples": []}
    # a refusal later made good has its image in images.jsonl (merged at the stage's end): the report reads the
    # merged records, as it does for scoring, and never hashes the images again
    done = {(r["prompt_id"], r["sample"]) for r in run.read_images()} if run.images.exists() else set()
    refused = [r for key, r in recorded_refusals(run).items() if key not in done]
    by: dict[str, int] = {}
    for r in refused:
        by[r["reason"]] = by.get(r["reason"], 0) + 1
    return {"n": len(refused), "by_reason": by,
            "examples": [{k: r.get(k) for k in ("prompt_id", "sample", "reason", "detail", "status")}
                         for r in refused[:5]]}


# the report's sections that read the model's activations (t2i_audit/report/templates/report.html.j2 ids)
NEEDS_WEIGHTS = {"probes": "Probes", "early": "Early prediction"}


def report_section(run: RunDir, manifest: dict) -> dict:
    """What a run's report says about where its images came from: the source, the refusals (counted apart from
    composition failures) and, for a model without a pipeline, which sections need the model's weights."""
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    kind = model.get("kind") or "pipeline"
    out = {"kind": kind, "source": model.get("source"), "refused": refusal_summary(run), "needs_weights": {}}
    if kind != "pipeline":
        why = (f"needs the model's activations; {model.get('source')} has no diffusers pipeline to read them from "
               "(`probe`, `probe --early`, `select` and `predict` refuse this run)")
        out["needs_weights"] = {key: f"{title}: {why}" for key, title in NEEDS_WEIGHTS.items()}
    return out
