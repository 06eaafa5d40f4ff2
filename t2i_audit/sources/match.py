"""Which suite record and sample each image of a folder is.

An image is matched by the record id it carries (a ``prompt_id`` column, GenEval's ``t2i_audit_id``), else by the
benchmark's own order where the suite was imported from that benchmark's file (GenEval: the folder's index is the
line of evaluation_metadata.jsonl, ``source_line`` - 1), else by its prompt text, normalised (Unicode NFC, runs of
white space as one space, ends stripped; case and punctuation kept). A text that two records share (a prompt a
benchmark file repeats) is told apart by the benchmark's order (T2I-CompBench's counter: the first -n images of
the text belong to its first occurrence …), or is an error naming both. Its sample is the layout's own number,
else its rank among the images of its record. Two images of one (record, sample) are an error naming both files.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Optional

from ..errors import AuditError
from .layouts import Entry


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", text)).strip()


@dataclass
class Matched:
    images: dict[tuple[str, int], Entry]  # (prompt id, sample) -> the image, for samples < -n
    unmatched: list[str] = field(default_factory=list)  # "where: why" — no record of the suite
    beyond: list[Entry] = field(default_factory=list)  # images of a sample past -n (hashed, not used)
    without: list[str] = field(default_factory=list)  # prompt ids with no image at all
    outside: list[str] = field(default_factory=list)  # images of suite records the run's --limit left out


def match(entries: list[Entry], records: list[dict], images_per_prompt: int,
          suite: Optional[list[dict]] = None) -> Matched:
    """Each entry's record and sample among ``records`` (the run's prompts); ``suite``: every record of the suite
    the run's ``--limit`` subset was drawn from (an image of a record left out is not used, and not unmatched)."""
    found = _match(entries, suite or records, images_per_prompt)
    run_ids = {r["id"] for r in records}
    kept = {key: e for key, e in found.images.items() if key[0] in run_ids}
    found.outside = [e.name for key, e in found.images.items() if key[0] not in run_ids]
    found.beyond = [e for e in found.beyond if e.prompt_record in run_ids]
    found.images = kept
    found.without = [r["id"] for r in records if not any((r["id"], k) in kept for k in range(images_per_prompt))]
    return found


def _match(entries: list[Entry], records: list[dict], images_per_prompt: int) -> Matched:
    by_id = {r["id"]: r for r in records}
    by_text: dict[str, list[dict]] = {}
    for r in records:
        by_text.setdefault(normalise(r["text"]), []).append(r)
    by_line = {r.get("source_line"): r for r in records if r.get("source") == "geneval"}
    unmatched: list[str] = []
    chosen: list[tuple[Entry, dict]] = []
    shared: dict[str, list[Entry]] = {}  # text several records share -> its images, ordered by the benchmark
    for e in entries:
        if e.prompt_id is not None:
            if e.prompt_id in by_id:
                chosen.append((e, by_id[e.prompt_id]))
                continue
            if e.text is None:
                unmatched.append(f"{e.where}: prompt id {e.prompt_id} is not in the suite")
                continue
        if e.index is not None and e.index + 1 in by_line and e.text is not None:  # GenEval's own order
            r = by_line[e.index + 1]
            if normalise(r["text"]) != normalise(e.text):
                raise AuditError(f"{e.where}: index {e.index} is line {e.index + 1} of the imported GenEval file, "
                                 f"{r['text']!r}, but its metadata says {e.text!r} (another metadata file?)")
            chosen.append((e, r))
            continue
        found = by_text.get(normalise(e.text or ""), [])
        if not found:
            unmatched.append(f"{e.where}: no prompt of the suite reads {e.text!r}")
        elif len(found) == 1:
            chosen.append((e, found[0]))
        elif e.index is None:
            a, b = found[:2]
            raise AuditError(f"{e.where}: its prompt {e.text!r} is the text of two suite records ({a['id']} and "
                             f"{b['id']}); name the record with a prompt_id column")
        else:
            shared.setdefault(normalise(e.text), []).append(e)
    for text, images in shared.items():  # occurrence k of the text holds its images k*n … k*n + n-1
        occurrences = sorted(by_text[text], key=lambda r: (r.get("source_line") or 0))
        for rank, e in enumerate(sorted(images, key=lambda e: e.index)):
            k = rank // images_per_prompt
            if k < len(occurrences):
                chosen.append((e, occurrences[k]))
            else:
                unmatched.append(f"{e.where}: more images of {e.text!r} than its {len(occurrences)} occurrences "
                                 f"× -n {images_per_prompt}")
    return _samples(chosen, records, images_per_prompt, unmatched)


def _samples(chosen: list[tuple[Entry, dict]], records: list[dict], n: int, unmatched: list[str]) -> Matched:
    per_record: dict[str, list[Entry]] = {}
    for e, r in chosen:
        per_record.setdefault(r["id"], []).append(e)
    out, seen = Matched({}, unmatched), {}
    for pid, images in per_record.items():
        numbered = all(e.sample is not None for e in images)
        ordered = images if numbered else sorted(images, key=lambda e: (e.index is None, e.index or 0))
        for rank, e in enumerate(ordered):
            k = e.sample if numbered else rank
            if (pid, k) in seen:
                first = seen[(pid, k)]
                raise AuditError(f"{e.where}: {e.name} is a second image of prompt {pid} sample {k} (also "
                                 f"{first.name}" + (f", {first.where}" if first.where != str(first.path) else "")
                                 + "); one image per prompt and sample")
            seen[(pid, k)] = e
            e.prompt_record = pid
            if k >= n:
                out.beyond.append(e)
                continue
            out.images[(pid, k)] = e
    out.without = [r["id"] for r in records if not any((r["id"], k) in out.images for k in range(n))]
    return out
