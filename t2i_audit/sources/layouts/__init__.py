"""The layouts a folder of images made elsewhere comes in, one small reader module each, one interface:

* ``LOOKS_FOR`` — what the layout is, in the words an error shows when a folder is not recognised;
* ``detect(root) -> bool`` — whether the folder has the layout's marks (cheap: names, not contents);
* ``read(root) -> Listing`` — every image the layout declares (:class:`Entry`: its file or bytes, the prompt
  text or id, sample, seed, the benchmark's own order), and what it passed over; hostile input (a broken line,
  a missing column, a link out of the folder) is an AuditError naming file:line.

Readers only list. Matching entries to a suite's records is :mod:`..match`; reading, validating and hashing the
bytes is :mod:`..folder` (through :func:`..base.read_image_file`): an image is never moved or changed.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ...errors import AuditError, did_you_mean

# --layout name -> reader module; a folder is tried against each (hf-dataset also takes hf:ORG/NAME, manifest a file)
LAYOUTS = {"geneval": "geneval", "t2i-compbench": "t2i_compbench", "imagefolder": "imagefolder",
           "hf-dataset": "hf_dataset", "manifest": "manifest"}
IMAGE_NAME = re.compile(r"\.(png|jpe?g|webp)$", re.IGNORECASE)  # the formats kept as their own bytes


@dataclass
class Entry:
    """One image a layout declares."""

    name: str  # what the user sees: the file relative to the folder, or "<dataset> row 12"
    where: str  # where it is declared: metadata.jsonl:3, or the file itself
    text: Optional[str] = None  # the prompt as the layout gives it
    prompt_id: Optional[str] = None  # a suite record's id, where the layout carries one
    sample: Optional[int] = None  # the layout's own sample number (None: by order among the prompt's images)
    seed: Optional[int] = None  # the seed the generator says it used
    index: Optional[int] = None  # the benchmark's own order: GenEval's line index, T2I-CompBench's counter
    path: Optional[Path] = None  # a file of the folder …
    fetch: Optional[Callable[[], bytes]] = field(default=None, repr=False)  # … or bytes a dataset holds
    prompt_record: Optional[str] = None  # the record it was matched to (match.py)

    @property
    def file(self) -> str:
        """The image as an error names it: its file (and the line declaring it), or the dataset's row."""
        if self.path is None:
            return self.where
        return str(self.path) if self.where == str(self.path) else f"{self.path} ({self.where})"


@dataclass
class Listing:
    layout: str
    source: str  # the folder, manifest file or hub id, as read
    root: Path  # files must lie inside it (links too)
    entries: list[Entry]
    skipped: list[str] = field(default_factory=list)  # "name: why", files the layout does not declare as images


def module(layout: str):
    if layout not in LAYOUTS:
        raise AuditError(f"--layout {layout!r}: not a layout t2i-audit reads; known: {', '.join(LAYOUTS)}."
                         f"{did_you_mean(layout, LAYOUTS)}")
    return importlib.import_module(f"{__name__}.{LAYOUTS[layout]}")


def looks_for() -> str:
    return "; ".join(module(name).LOOKS_FOR for name in LAYOUTS)


def detect(source: str) -> str:
    """The layout of ``source`` (a folder, a manifest file, or ``hf:ORG/NAME``), or an AuditError saying what was
    looked for (none found) or which layouts it has (more than one: ``--layout`` chooses)."""
    if source.startswith("hf:"):
        return "hf-dataset"
    p = Path(source)
    if not p.exists():
        raise AuditError(f"--images {source}: no such folder or file (a Hugging Face dataset on the Hub is "
                         "given as hf:ORG/NAME)")
    if p.is_file():
        return "manifest"
    found = [name for name in LAYOUTS if name != "manifest" and module(name).detect(p)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise AuditError(f"--images {source}: no layout of images recognised; looked for {looks_for()}")
    raise AuditError(f"--images {source}: the folder has the marks of several layouts ({', '.join(found)}); "
                     f"choose one with --layout {' | '.join(found)}")


def read(source: str, layout: Optional[str] = None) -> Listing:
    """Every image ``source`` declares, read with ``layout`` (detected when None)."""
    layout = layout or detect(source)
    mod = module(layout)
    if layout == "hf-dataset":
        return mod.read(source)
    p = Path(source)
    if layout == "manifest" and not p.is_file():
        raise AuditError(f"--images {source}: --layout manifest reads a CSV or JSONL file (path, prompt …), "
                         "not a folder")
    if layout != "manifest" and not p.is_dir():
        raise AuditError(f"--images {source}: --layout {layout} reads a folder ({mod.LOOKS_FOR})")
    return mod.read(p)


def folder_entries(folder: Path) -> list[os.DirEntry]:
    """A folder's entries by name (visible ones: hidden names are a tool's or the OS's own files)."""
    with os.scandir(folder) as it:
        return sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)


def rel(path: Path, root: Path) -> str:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)
