"""The score stage: batched, each image decoded once, resumable.

Resume rule (the records are the cache): an image counts as done for a scorer when
``scores/<scorer>.jsonl`` holds its ``prompt`` record (written last, in the same append as the
image's other records) with the same ``image_sha256``, ``scorer_model``, ``scorer_revision``
and ``extra.card_hash`` (a fingerprint of the card: model, templates, thresholds, options).
Records of an image whose prompt record is missing (a kill mid-append) or stale (regenerated
image, changed card) are dropped by an atomic rewrite before scoring starts, then recomputed.
A separate answer cache would hold the same raw values these records already hold, keyed
the same way (model + revision + image sha256 + question); changing only a threshold is what
``calibrate`` is for and needs no model call.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..errors import AuditError
from ..rundir import RunDir, append_jsonl, atomic_write_jsonl, read_jsonl, repair_jsonl
from .base import Scorer, ScoreItem
from .registry import create_scorer, load_cards


def resolve_device(device: str) -> str:
    if device in (None, "", "auto"):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _image_key(rec: Mapping) -> tuple[str, int]:
    return (rec["prompt_id"], int(rec.get("sample", 0)))


def compact_scores(path: Path, scorer: Scorer, images: Mapping[tuple, dict]) -> set[tuple]:
    """Drop unfinished/stale images' records from ``path``; return keys of finished images."""
    repair_jsonl(path)
    records = read_jsonl(path)
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        by_key[_image_key(r)].append(r)
    done, keep, dropped = set(), [], 0
    for key, recs in by_key.items():
        img = images.get(key)
        prompt = [r for r in recs if r.get("kind") == "prompt"]
        if img is None:  # not (or no longer) in images.jsonl: leave it alone
            keep.extend(recs)
            continue
        ok = len(prompt) == 1 and all(
            (prompt[0].get("image_sha256") == img.get("sha256"),
             prompt[0].get("scorer_model") == scorer.model_id,
             prompt[0].get("scorer_revision") == scorer.revision,
             (prompt[0].get("extra") or {}).get("card_hash") == scorer.fingerprint))
        if ok:
            done.add(key)
            keep.extend(recs)
        else:
            dropped += len(recs)
    if dropped:
        atomic_write_jsonl(path, keep)
    return done


def _decode(run_dir: RunDir, rec: Mapping):
    from PIL import Image

    path = run_dir.root / rec["path"]
    if not path.exists():
        raise AuditError(f"{path}: image listed in {run_dir.images} is missing")
    try:
        with Image.open(path) as im:
            return im.convert("RGB"), path
    except OSError as e:
        raise AuditError(f"{path}: cannot decode image ({e})") from None


def _verdict_counts(records: Iterable[dict], counts: dict) -> None:
    for r in records:
        if r["kind"] != "prompt":
            continue
        if (r.get("extra") or {}).get("excluded"):
            counts["excluded"] += 1
        elif r["verdict"] is True:
            counts["passed"] += 1
        elif r["verdict"] is False:
            counts["failed"] += 1
        else:
            counts["undecided"] += 1
        for f in r.get("failures") or []:
            counts["failures"][f["type"]] = counts["failures"].get(f["type"], 0) + 1
        counts["truncated"] += int(bool(r.get("truncated")))


def run_score_stage(run_dir: RunDir | str | Path, scorers: Sequence[str], *, device: str = "cpu",
                    batch_size: int = 16, progress: bool = True,
                    overrides: Mapping[str, dict] | None = None,
                    extra_cards: Iterable[str | Path] = (),
                    instances: Sequence[Scorer] | None = None) -> dict:
    """Score every image of ``run_dir`` with each scorer; returns counts per scorer.

    ``overrides`` maps scorer name → a partial card merged into its card (e.g.
    ``{"clip": {"model": {"id": "/models/clip"}}}``). ``instances`` passes ready scorer
    objects instead of names (tests, notebooks).
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if not rd.root.is_dir():
        raise AuditError(f"{rd.root}: run directory not found")
    prompts = {p["id"]: p for p in rd.read_prompts()}
    images = rd.read_images()
    if not images:
        raise AuditError(f"{rd.images}: no images to score (run the generate stage first)")
    for rec in images:
        if not rec.get("flags") and not (rd.root / rec["path"]).is_file():  # fail before writing anything
            raise AuditError(f"{rd.root / rec['path']}: image listed in {rd.images} is missing")
        if rec["prompt_id"] not in prompts:
            raise AuditError(f"{rd.images}: image {rec.get('path')} refers to prompt "
                             f"{rec['prompt_id']!r}, which is not in {rd.prompts}")
    if instances is None:
        if not scorers:
            raise AuditError("no scorer given (see `t2i-audit scorers`)")
        dev = resolve_device(device)
        cards = load_cards(extra_cards)
        instances = [create_scorer(n, device=dev, cards=cards,
                                   overrides=(overrides or {}).get(n)) for n in scorers]
    by_key = {_image_key(r): r for r in images}
    rd.scores_dir.mkdir(parents=True, exist_ok=True)
    rd.update_stage("score", status="running", running=[s.name for s in instances])
    todo: dict[str, set] = {}
    counts: dict[str, dict] = {}
    for s in instances:
        done = compact_scores(rd.scores(s.name), s, by_key)
        todo[s.name] = {k for k in by_key if k not in done}
        counts[s.name] = {"images": len(by_key), "resumed": len(by_key) - len(todo[s.name]),
                          "scored": 0, "excluded": 0, "passed": 0, "failed": 0, "undecided": 0,
                          "truncated": 0, "records": 0, "seconds": 0.0, "load_seconds": 0.0, "failures": {},
                          "model": s.model_id, "revision": s.revision}
    pending = [r for r in images if any(_image_key(r) in t for t in todo.values())]
    bar = None
    if progress and pending:
        from tqdm import tqdm

        bar = tqdm(total=len(pending), desc="score", unit="img")
    t_stage = time.perf_counter()
    broken: dict[str, str] = {}  # scorer name -> the error that stopped it
    for start in range(0, len(pending), max(1, batch_size)):
        chunk = pending[start:start + batch_size]
        items = []
        for rec in chunk:  # each image decoded once, shared by all scorers
            prompt = prompts[rec["prompt_id"]]
            if rec.get("flags"):
                items.append(ScoreItem(prompt, rec))
            else:
                img, path = _decode(rd, rec)
                items.append(ScoreItem(prompt, rec, img, path))
        for s in instances:
            mine = [it for it in items if it.key in todo[s.name]]
            if not mine or s.name in broken:
                continue
            live = [it for it in mine if not it.flags]
            if live and not s._loaded:
                t_load = time.perf_counter()
                s.load()
                counts[s.name]["load_seconds"] = round(time.perf_counter() - t_load, 3)
                counts[s.name]["applied"] = s.model_details()  # e.g. the tag's QuickGELU and mean/std
            t0 = time.perf_counter()
            results = {}
            try:
                if live:
                    for it, recs in zip(live, s.score(live)):
                        results[it.key] = recs
            except Exception as e:  # noqa: BLE001 - one broken scorer must not sink the others
                # Nothing of this batch is written, so a rerun retries exactly these images.
                broken[s.name] = f"{type(e).__name__}: {e}"
                counts[s.name]["error"] = broken[s.name]
                counts[s.name]["skipped"] = len(todo[s.name]) - counts[s.name]["scored"] - counts[s.name]["excluded"]
                continue
            out = []
            for it in mine:
                out.extend(s.excluded_records(it) if it.flags else results[it.key])
            append_jsonl(rd.scores(s.name), out)
            c = counts[s.name]
            c["seconds"] += time.perf_counter() - t0
            c["scored"] += len(live)
            c["records"] += len(out)
            _verdict_counts(out, c)
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    for c in counts.values():
        c["seconds"] = round(c["seconds"], 3)
        c["records_per_s"] = round(c["records"] / c["seconds"], 1) if c["seconds"] > 0 else None
    before = rd.read_manifest().get("stages", {}).get("score", {}).get("scorers")
    merged = {**(before if isinstance(before, dict) else {}), **counts}  # other scorers' counts stay
    for name, err in broken.items():
        print(f"warning: scorer {name} failed ({err}); {counts[name]['skipped']} images left unscored "
              "for it — rerun to retry them", file=sys.stderr)
    rd.update_stage("score", status="done_with_errors" if broken else "done", scorers=merged, running=[],
                    errors=broken,
                    seconds=round(time.perf_counter() - t_stage, 3),
                    device=instances[0].device if instances else device)
    return counts
