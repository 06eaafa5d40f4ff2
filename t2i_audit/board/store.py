"""The board folder's index (``board.json``): which runs it holds, the files written for each, and the
snapshots (one per build that changed the runs; each is a split of every table, named by its UTC time as
lm-evaluation-harness names its runs, plus ``latest``).

``board.json`` is written last, atomically: a build killed before it leaves the previous board whole (the
files it wrote for a new snapshot are named by content or time and referenced only from the new index).
Paths in the index are relative to the board and are checked on reading: an index edited to point outside
the board, or to a file of another name, is refused, never followed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from pathlib import Path

from ..errors import AuditError

VERSION = 1
INDEX = "board.json"
IMAGE_MODES = ("none", "embed", "folder")
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,150}")
_FILE = re.compile(r"data/[a-z]+/[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.parquet|images/[A-Za-z0-9][A-Za-z0-9._-]{0,200}/metadata\.jsonl")


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)


def split_name(when: _dt.datetime, taken: set) -> str:
    """``2026_12_06T05_30_00``: lm-evaluation-harness' split names (``re.sub(r"[^\\w\\.]", "_", date)``,
    lm_eval/loggers/evaluation_tracker.py ``recreate_metadata_card``); a second build in one second gets ``_2``."""
    base = re.sub(r"[^\w.]", "_", when.strftime("%Y-%m-%dT%H:%M:%S"))
    name, i = base, 1
    while name in taken or name == "latest":
        i += 1
        name = f"{base}_{i}"
    return name


def run_id(folder: str, taken: set) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]", "-", folder).strip(".-")[:80] or "run"
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}-{i}"
    return name


def file_id(rid: str, hashes: dict) -> str:
    """Per-run files are named by the run and what was read: a re-read run gets new files, the old ones stay
    for the snapshots that list them."""
    digest = hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:10]
    return f"{rid}__{digest}"


def run_root(board: Path, entry: dict) -> Path:
    """A run's folder: its path is kept relative to the board, so that a board moved (or committed) together
    with its runs still finds them."""
    return (Path(board) / entry["path"]).resolve()


def relative_path(board: Path, root: Path) -> str:
    return Path(os.path.relpath(Path(root).resolve(), Path(board).resolve())).as_posix()


def new_index(*, title: str, images: str, allow_different_suites: bool, seed: int,
              strict_settings: bool = False) -> dict:
    return {"tool": "t2i-audit", "kind": "board", "version": VERSION, "title": title, "images": images,
            "allow_different_suites": allow_different_suites, "strict_settings": strict_settings, "seed": seed,
            "repo": None, "runs": [], "snapshots": []}


# what a run's entry holds (build._entry) and what later builds read of it, with its type
ENTRY_KEYS = {"path": str, "file_id": str, "folder": str, "added_utc": str, "hashes": dict, "files": dict,
              "config": dict, "model": dict, "suites": list, "judges": dict, "scorers": list, "images": int,
              "calibration": (dict, type(None))}


def _calibration_ok(report, where: str) -> None:
    """A run's calibration report as the board stored it must pool (t2i_audit.deciding reads it)."""
    if report is None:
        return
    from ..deciding import pool_calibration

    try:
        pool_calibration([report])
    except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError):
        raise AuditError(f"{where}: not a calibration report t2i-audit calibrate writes; restore board.json") from None


def _file_ok(rec, where: str) -> None:
    if not (isinstance(rec, dict) and isinstance(rec.get("path"), str) and _FILE.fullmatch(rec["path"])
            and isinstance(rec.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", rec["sha256"])):
        raise AuditError(f"{where}: not a file record of this board ({json.dumps(rec)[:120]}); restore board.json")


def validate(index: dict, path: Path) -> dict:
    """Refuse an index this version did not write, or one edited into something it cannot follow safely."""
    if index.get("tool") != "t2i-audit" or index.get("kind") != "board":
        raise AuditError(f"{path}: not a t2i-audit board index")
    if index.get("version") != VERSION:
        raise AuditError(f"{path}: board version {index.get('version')!r}; this t2i-audit reads version {VERSION}")
    if index.get("images") not in IMAGE_MODES:
        raise AuditError(f"{path}: images: {index.get('images')!r} is not one of {', '.join(IMAGE_MODES)}")
    for key, kind in (("runs", list), ("snapshots", list), ("seed", int), ("title", str),
                      ("allow_different_suites", bool)):
        if not isinstance(index.get(key), kind) or (kind is int and isinstance(index.get(key), bool)):
            raise AuditError(f"{path}: {key}: expected {kind.__name__}")
    if not isinstance(index.setdefault("strict_settings", False), bool):  # (absent on boards made before it)
        raise AuditError(f"{path}: strict_settings: expected bool")
    if index.get("repo") is not None and not (isinstance(index["repo"], str) and REPO_ID.fullmatch(index["repo"])):
        raise AuditError(f"{path}: repo: {index['repo']!r} is not a Hub dataset id NAMESPACE/NAME")
    ids = set()
    for i, e in enumerate(index["runs"]):
        where = f"{path}: runs[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("id"), str) or not _SAFE.fullmatch(e["id"]):
            raise AuditError(f"{where}: no valid run id")
        if e["id"] in ids:
            raise AuditError(f"{where}: run id {e['id']} twice")
        ids.add(e["id"])
        for key, kind in ENTRY_KEYS.items():
            if not isinstance(e.get(key), kind) or isinstance(e.get(key), bool) and kind is not bool:
                raise AuditError(f"{where}.{key}: expected {getattr(kind, '__name__', 'a value of another type')}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in e["hashes"].items()):
            raise AuditError(f"{where}.hashes: expected file -> sha256")
        if not all(isinstance(j, dict) for j in e["judges"].values()) or \
                not all(isinstance(x, str) for x in e["suites"] + e["scorers"]):
            raise AuditError(f"{where}: judges, suites or scorers of another shape than this board writes")
        for name, j in e["judges"].items():
            if set(j) - {"model", "revision", "protocol"} or not all(v is None or isinstance(v, str) for v in j.values()):
                raise AuditError(f"{where}.judges.{name}: expected model, revision and protocol as text")
        if not isinstance(e["model"].get("call") or {}, dict):
            raise AuditError(f"{where}.model.call: expected a mapping")
        _calibration_ok(e["calibration"], f"{where}.calibration")
        if e["files"].keys() - {"questions", "images", "probes", "gallery"} or "images" not in e["files"]:
            raise AuditError(f"{where}.files: not the tables this board writes")
        for name, rec in e["files"].items():
            _file_ok(rec, f"{where}.files.{name}")
    splits = set()
    for i, s in enumerate(index["snapshots"]):
        where = f"{path}: snapshots[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("split"), str) or not re.fullmatch(r"[\w.]+", s["split"]):
            raise AuditError(f"{where}: no valid split name")
        if not isinstance(s.get("runs"), list) or not isinstance(s.get("files"), dict):
            raise AuditError(f"{where}: lacks runs or files")
        for name, rec in s["files"].items():
            _file_ok(rec, f"{where}.files.{name}")
        for j, r in enumerate(s["runs"]):
            if not isinstance(r, dict):
                raise AuditError(f"{where}.runs[{j}]: expected the run's file records")
            for name, rec in r.items():
                _file_ok(rec, f"{where}.runs[{j}].{name}")
        splits.add(s["split"])
    return index


def entry_files(entry: dict) -> dict:
    return {k: dict(v) for k, v in entry["files"].items()}
