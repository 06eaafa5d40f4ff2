"""Hugging Face ImageFolder (datasets' ``imagefolder`` builder): images beside a ``metadata.jsonl`` (or
``metadata.csv``) whose ``file_name`` column names each image relative to the folder; here also a ``prompt``
(or ``text`` / ``caption``) or ``prompt_id`` column, and optionally ``sample`` and ``seed``."""

from __future__ import annotations

from pathlib import Path

from . import IMAGE_NAME, Listing, folder_entries
from .rows import entries_of

LOOKS_FOR = "Hugging Face ImageFolder's metadata.jsonl / metadata.csv (file_name, prompt [, sample, seed])"
FILES = ("metadata.jsonl", "metadata.csv")


def detect(root: Path) -> bool:
    return any((root / f).is_file() for f in FILES)


def read(root: Path) -> Listing:
    found = [f for f in FILES if (root / f).exists()]
    table = root / found[0] if found else root / FILES[0]  # read_text names a missing one
    entries = entries_of(table, root, ("file_name",))
    listed = {x.name for x in entries}
    skipped = [f"{e.name}: an image {table.name} does not list" for e in folder_entries(root)
               if IMAGE_NAME.search(e.name) and e.name not in listed]
    return Listing("imagefolder", str(root), root, entries, skipped)
