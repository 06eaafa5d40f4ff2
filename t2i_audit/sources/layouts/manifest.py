"""A manifest: a CSV or JSONL file, one image a row — ``path`` (or ``file_name`` / ``image``: relative to the
manifest's folder, inside it), ``prompt`` (or ``text`` / ``caption``) or ``prompt_id``, optionally ``sample``
and ``seed``. Given to ``--images`` as the file itself."""

from __future__ import annotations

from pathlib import Path

from . import Listing
from .rows import entries_of

LOOKS_FOR = "a CSV/JSONL manifest file (path, prompt [, sample, seed])"


def detect(root: Path) -> bool:
    return root.is_file()


def read(path: Path) -> Listing:
    root = path.resolve().parent
    return Listing("manifest", str(path), root, entries_of(path, root, ("path", "file_name", "image")))
