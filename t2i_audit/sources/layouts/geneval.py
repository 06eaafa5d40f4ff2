"""GenEval's layout (djghosh13/geneval, generation/diffusers_generate.py): one folder per line of
``evaluation_metadata.jsonl`` named by its 0-based index (``00000``), holding ``metadata.jsonl`` (that line's object,
with ``prompt``) and ``samples/NNNN.png`` (sample N); a ``grid.png`` beside them is the script's preview. A
``t2i_audit_id`` key (written by ``prompts export --layout geneval``) names the suite record."""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import AuditError
from ...safeload import loads_json, read_text, split_lines
from ..base import inside
from . import IMAGE_NAME, Entry, Listing, folder_entries, rel

LOOKS_FOR = "GenEval's <index>/metadata.jsonl + <index>/samples/NNNN.png"
SAMPLE = re.compile(r"^(\d+)\.(png|jpe?g|webp)$", re.IGNORECASE)


def detect(root: Path) -> bool:
    return any(e.name.isdigit() and e.is_dir() and (Path(e.path) / "metadata.jsonl").is_file()
               for e in folder_entries(root))


def read(root: Path) -> Listing:
    entries, skipped, seen = [], [], {}
    for e in folder_entries(root):
        if not e.name.isdigit():
            if e.name not in ("evaluation_metadata.jsonl", "prompts.jsonl", "expected.txt"):
                skipped.append(f"{e.name}: not an <index> folder")
            continue
        folder = inside(Path(e.path), root, rel(Path(e.path), root))
        if not folder.is_dir():
            raise AuditError(f"{root / e.name}: expected a folder (GenEval's <index>/), found a file")
        index = int(e.name)
        if index in seen:
            raise AuditError(f"{root / e.name}: index {index} again (also {root / seen[index]})")
        seen[index] = e.name
        meta_file = root / e.name / "metadata.jsonl"
        meta = _metadata(meta_file, root)
        samples = root / e.name / "samples"
        if not samples.is_dir():
            continue  # a prompt the generator has not reached: the match lists it without images
        inside(samples, root, rel(samples, root))
        for f in folder_entries(samples):
            name = rel(Path(f.path), root)
            m = SAMPLE.match(f.name)
            if not m:
                skipped.append(f"{name}: not samples/NNNN.png" if not IMAGE_NAME.search(f.name) else
                               f"{name}: not named by its sample number (NNNN.png)")
                continue
            entries.append(Entry(name=name, where=str(f.path), text=meta["prompt"], prompt_id=meta.get("t2i_audit_id"),
                                 sample=int(m.group(1)), index=index, path=Path(f.path)))
    return Listing("geneval", str(root), root, entries, skipped)


def _metadata(path: Path, root: Path) -> dict:
    where = rel(path, root)
    inside(path, root, where)
    lines = [(i, line) for i, line in split_lines(read_text(path)) if line.strip()]
    if not lines:
        raise AuditError(f"{path}: empty (GenEval's metadata.jsonl holds the prompt's line of evaluation_metadata)")
    i, line = lines[0]
    meta = loads_json(line, f"{path}:{i}", what="not a JSON object")
    if not isinstance(meta, dict) or not isinstance(meta.get("prompt"), str) or not meta["prompt"].strip():
        raise AuditError(f"{path}:{i}: expected a JSON object with a non-empty \"prompt\" (GenEval metadata)")
    if "t2i_audit_id" in meta and not isinstance(meta["t2i_audit_id"], str):
        raise AuditError(f"{path}:{i}: t2i_audit_id must be a string (a prompt id)")
    return meta
