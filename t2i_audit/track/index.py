"""A track folder and its index: which runs it holds, in step order, and what was skipped.

    TRACK/
      .t2i-audit.json        kind "track": the evaluation protocol every run of the track shares
      track.json             the index (this module): one entry per audited checkpoint, the skipped ones
      runs/<label>/          one normal run per checkpoint (report, compare and verify take it)
      activations/<label>/   the denoiser states of a replay on seeds no judged image used (capture.py)
      index.html, curves.json, track.parquet / .csv   (page.py: composition over training)

Entries come from ``t2i-audit track`` (a training run's saved checkpoints; the base model is step 0) and from
``TrackCallback`` (a training loop's live weights); each records where its weights came from.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import AuditError
from ..rundir import atomic_write_json
from ..safeload import read_json

INDEX = "track.json"
KIND = "t2i-audit track"


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str                       # "base", "checkpoint-200", "final", "step-200" (in-process)
    step: Optional[int] = None       # training step (None: the final output, whose step no file names)
    order: list = []                 # sort key: base first, checkpoints by step, the final last
    source: str                      # the checkpoint's folder, the base model, or "in-process"
    layout: str = ""                 # discover.py's layout ("components", "lora", "accelerate", "pipeline" …)
    components: dict[str, str] = {}
    loras: list[str] = []
    ema: bool = False
    run: str                         # runs/<folder>, relative to the track
    status: str = "pending"          # "done" | "failed" | "pending"
    error: Optional[str] = None
    activations: Optional[str] = None  # activations/<folder>, relative to the track
    notes: list[str] = []
    seconds: Optional[float] = None
    files: Optional[str] = None      # files_signature of its weights when audited: a rerun redoes it only if changed


class Skip(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str
    path: str
    reason: str


class Index(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = KIND
    version: int = 1
    settings: dict = {}
    entries: list[Entry] = []
    skipped: list[Skip] = []
    sessions: list[dict] = []       # per invocation: when, what it audited, what it loaded (reuse.Session.loads)
    updated_utc: str = ""

    def entry(self, label: str) -> Optional[Entry]:
        return next((e for e in self.entries if e.label == label), None)

    def put(self, entry: Entry) -> None:
        self.entries = sorted([e for e in self.entries if e.label != entry.label] + [entry], key=lambda e: e.order)


def files_signature(paths) -> str:
    """The fingerprint of a checkpoint's weight files by content (each file's path and sha256): a rerun audits a
    checkpoint again exactly when its weights changed. Size and mtime were used before, and a checkpoint replaced by
    other weights of the same size and mtime was silently reused (its page showed the old weights' numbers).
    Cost: one read of the weights per track invocation (sha256 of a 256 MiB file from the page cache: 0.73 s on the
    shared 2-core development machine, 0.35 GB/s — a 3.4 GB UNet about 10 s); memoised within the process, so the
    run's own identity (variants, file_sha256) does not read them again."""
    import hashlib

    from ..rundir import content_id

    h = hashlib.sha1()
    for p in sorted(Path(x) for x in paths):
        for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
            if f.is_file():
                h.update(f"{f}\0{content_id(f)}\n".encode())
    return h.hexdigest()[:16]


def folder_name(label: str) -> str:
    """A label as one folder name (``checkpoints/checkpoint_3`` → ``checkpoints-checkpoint_3``)."""
    return label.replace("/", "-")


def order_key(label: str, step: Optional[int]) -> list:
    if label == "base":
        return [0, 0, 0]
    if step is None:  # the final output: after every checkpoint
        return [2, 0, 0]
    return [1, step, 1 if label.startswith("checkpoints/") else 0]


def load_index(root: Path) -> Index:
    """The track's index (an empty one for a new track), validated: a damaged file is named, never guessed at."""
    path = Path(root) / INDEX
    if not path.is_file():
        return Index()
    data = read_json(path, finite=False)
    try:
        index = Index.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        raise AuditError(f"{path}: not a track index ({'.'.join(map(str, first['loc']))}: {first['msg']}); "
                         "it is the track's own record — restore it, or start a new track folder") from None
    if index.kind != KIND:
        raise AuditError(f"{path}: not a track index (kind {index.kind!r})")
    return index


def save_index(root: Path, index: Index) -> None:
    index.updated_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    atomic_write_json(Path(root) / INDEX, index.model_dump())
