"""The judge in your own loop: ``api.judge(images, prompts)`` — verdicts without a run.

For people who only want t2i-audit's judges inside their own sampling or training loop (as t2v_metrics offers its
scores in one call). It is the score stage itself, not a copy: the images and prompts are laid out as a run in a
temporary folder (the images written as ``write_image`` writes any arriving image), scored by
``scorers.stage.run_score_stage`` with the same scorers, and each category's verdict taken from its deciding scorer
by ``deciding.deciding_scorers`` — so a verdict here equals the verdict a run gives the same image (a test holds
the two equal). Scorers are loaded once per process and reused by later calls.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from .errors import AuditError

_LOADED: dict[tuple[str, str], Any] = {}  # (scorer name, device) -> a loaded Scorer, reused by every call


def judge(images: Sequence, prompts: Sequence[Union[str, dict]], *, scorer: Union[None, str, Iterable[str]] = None,
          suite: Union[None, str, Iterable[str]] = None, device: str = "cpu", batch_size: int = 16,
          progress: bool = False) -> list[dict]:
    """Judge each image against its prompt; one result per image, in order.

    ``images``: PIL images, paths of image files, or encoded bytes. ``prompts``: one per image — a PromptRecord
    (a dict from ``prompts.jsonl`` / ``t2i-audit prompts export``) or a prompt text, looked up (case and spacing
    aside) among the records of ``suite`` (suite names or YAML/JSONL paths; default: every shipped suite).
    ``scorer``: a scorer name or several (``t2i-audit scorers``); default: the run's defaults for the prompts'
    categories. ``batch_size``: images a judge sees at once (a run's ``--batch-size`` gives its batches).

    Each result::

        {"prompt_id", "text", "category", "sample",
         "verdict": True | False | None,      # the deciding scorer's: every question passed
         "scorer": "mini-judge",               # the deciding scorer of the category (None: none decides)
         "why": "...",                         # why it decides (measured agreement, t2i_audit.deciding)
         "failures": [{"type": "swapped_binding", "slot": ..., "object": ...}, ...],
         "questions": [{"id", "text", "verdict", "value"}, ...],
         "by_scorer": {name: {"verdict", "failures", "questions": {question id: verdict}}}}
    """
    images, records = list(images), _records(prompts, suite)
    if len(images) != len(records):
        raise AuditError(f"judge: {len(images)} images and {len(records)} prompts; give one prompt per image")
    if not images:
        return []
    from .rundir import RunDir, atomic_write_jsonl
    from .scorers import default_scorers
    from .scorers.registry import create_scorer
    from .scorers.stage import run_score_stage
    from .sources.base import ImageRequest, write_image

    names = [scorer] if isinstance(scorer, str) else list(scorer) if scorer is not None else \
        default_scorers({r["category"] for r in records})
    instances = []
    for name in names:
        if (name, device) not in _LOADED:
            _LOADED[(name, device)] = create_scorer(name, device=device)
        instances.append(_LOADED[(name, device)])
    with tempfile.TemporaryDirectory(prefix="t2i-judge-") as tmp:
        rd = RunDir(tmp)
        unique = list({r["id"]: r for r in records}.values())
        atomic_write_jsonl(rd.prompts, unique)
        seen: dict[str, int] = {}
        image_records = []
        for i, (image, rec) in enumerate(zip(images, records)):
            sample = seen[rec["id"]] = seen.get(rec["id"], -1) + 1  # a prompt judged twice: samples 0, 1, …
            req = ImageRequest(rec["id"], sample, rec["text"], seed=None)
            image_records.append(write_image(rd, "api.judge", req, _image(image, i), seconds=0.0,
                                             where=f"judge: image {i}"))
        atomic_write_jsonl(rd.images, image_records)
        run_score_stage(rd, names, instances=instances, device=device, batch_size=batch_size, progress=progress)
        return _results(rd, records, image_records, names)


def _image(image, i: int):
    from PIL import Image

    if isinstance(image, (str, Path)):
        from .safeload import read_bytes

        path = Path(image)
        if not path.is_file():
            raise AuditError(f"judge: image {i}: {path} is not a file")
        return read_bytes(path)
    if isinstance(image, (bytes, bytearray, Image.Image)):
        return image
    from .sources.callable import to_image

    return to_image(image, f"judge: image {i}")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).strip().rstrip(".").lower()


def _records(prompts: Sequence, suite) -> list[dict]:
    """A PromptRecord for each prompt: dicts as they are (checked), texts looked up in ``suite``."""
    from .records import problems_of

    out, index = [], None
    for i, p in enumerate(prompts):
        if isinstance(p, dict):
            found = problems_of("prompts", p)
            if found:
                raise AuditError(f"judge: prompt {i}: not a PromptRecord: {'; '.join(found[:3])}")
            out.append(p)
            continue
        if not isinstance(p, str):
            raise AuditError(f"judge: prompt {i}: expected a text or a PromptRecord, got {type(p).__name__}")
        if index is None:
            index = _suite_index(suite)
        rec = index.get(_norm(p))
        if rec is None:
            raise AuditError(f"judge: prompt {i} {p!r} is in none of the suites searched ({', '.join(map(str, _suite_names(suite)))}); "
                             "pass its PromptRecord (`t2i-audit prompts export` / `prompts import`) or suite=")
        out.append(rec)
    return out


def _suite_names(suite) -> list[str]:
    if suite is None:
        from .suite import shipped_suite_names

        return shipped_suite_names()
    return [suite] if isinstance(suite, (str, Path)) else [str(s) for s in suite]


def _suite_index(suite) -> dict[str, dict]:
    from .prompts import expand_files

    names = _suite_names(suite)
    records = expand_files([n for n in names if not str(n).endswith(".jsonl")])
    if any(str(n).endswith(".jsonl") for n in names):  # PromptRecords (`prompts import` / `prompts export`)
        from .importers import read_prompt_records

        records += [r for n in names if str(n).endswith(".jsonl") for r in read_prompt_records(n)]
    index: dict[str, dict] = {}
    for rec in records:
        index.setdefault(_norm(rec["text"]), rec)
    return index


def _results(rd, records: list[dict], image_records: list[dict], names: list[str]) -> list[dict]:
    from .deciding import deciding_scorers
    from .records import score_records

    by: dict[str, dict[tuple, list[dict]]] = {}
    for name in names:
        for r in score_records(rd.scores(name)):
            by.setdefault(name, {}).setdefault((r["prompt_id"], r["sample"]), []).append(r)
    deciding = deciding_scorers(rd, {r["category"] for r in records})
    out = []
    for rec, img in zip(records, image_records):
        key = (img["prompt_id"], img["sample"])
        per = {}
        for name in names:
            recs = by.get(name, {}).get(key, [])
            prompt = next((r for r in recs if r["kind"] == "prompt"), {})
            per[name] = {"verdict": prompt.get("verdict"), "failures": prompt.get("failures", []),
                         "questions": {r["question_id"]: r["verdict"] for r in recs if r["kind"] == "question"},
                         "values": {r["question_id"]: r["value"] for r in recs if r["kind"] == "question"}}
        d = deciding.get(rec["category"], {})
        chosen: Optional[str] = d.get("scorer")
        mine = per.get(chosen, {}) if chosen else {}
        out.append({"prompt_id": rec["id"], "text": rec["text"], "category": rec["category"], "sample": key[1],
                    "verdict": mine.get("verdict"), "scorer": chosen, "why": d.get("why"),
                    "failures": mine.get("failures", []),
                    "questions": [{"id": q["id"], "text": q["text"], "verdict": mine.get("questions", {}).get(q["id"]),
                                   "value": mine.get("values", {}).get(q["id"])} for q in rec.get("questions", [])],
                    "by_scorer": {n: {k: v for k, v in s.items() if k != "values"} for n, s in per.items()}})
    return out
