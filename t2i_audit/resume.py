"""One rule for resuming: work on disk is reused only when every setting that made it matches.

A command that resumes a file (``select``'s scan risks, an output folder's whole contents) records
the settings that made it — readable, plus their :func:`settings_id` — and on the next call reuses
what was made with the same id only. Anything else in the file (other settings, lines written before
settings were recorded, lines that are not ours) is done again, never mixed in: a risk computed at
another step, or an image planned in other batches, is not this call's result.

Per-record stamps (``made_with``) rather than a sidecar file: a JSONL rewritten batch by batch then
carries its settings in the same atomic write, so a kill can never separate the two.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Mapping, Optional

MADE_WITH = "made_with"  # the key a resumable record keeps its settings id under


def settings_id(settings: Mapping[str, Any]) -> str:
    """A stable hash of ``settings`` (canonical JSON: key order, tuples vs lists and 1 vs 1.0 as
    JSON writes them), 16 hex digits."""
    canonical = json.dumps(_plain(settings), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _plain(obj):
    """What the settings look like after a JSON round trip (a marker or a record read back)."""
    return json.loads(json.dumps(obj, default=str))


def differences(recorded: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """``name: old → new`` for every setting that differs (as JSON would store them), sorted."""
    old, new = _plain(dict(recorded)), _plain(dict(wanted))
    show = lambda v: "(not set)" if v is None else json.dumps(v, ensure_ascii=False)  # noqa: E731
    return [f"{k}: {show(old.get(k))} → {show(new.get(k))}" for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k)]


def stamped(records: Iterable[dict], settings: Mapping[str, Any]) -> list[dict]:
    """``records`` with the id of the settings that made them (a copy of each)."""
    made_with = settings_id(settings)
    return [{**r, MADE_WITH: made_with} for r in records]


def reusable_records(path: Path | str, settings: Mapping[str, Any],
                     key: Callable[[dict], Hashable], kind: Optional[str] = None) -> dict[Hashable, dict]:
    """The records of the JSONL ``path`` that were made with exactly ``settings``, by ``key``.

    Everything else in the file is left out, so the caller recomputes it: records of other settings,
    records from before settings were recorded (no stamp), anything not a JSON object or without the
    fields ``key`` reads. A missing file has none. ``kind`` (a :data:`t2i_audit.records.RECORD_KINDS` name):
    every record is checked first — one edited or damaged since it was written is refused at ``file:line``,
    never reused with a wrong value nor silently recomputed over.
    """
    from .records import read_records
    from .safeload import jsonl_lines

    path = Path(path)
    if not path.is_file():
        return {}
    made_with = settings_id(settings)
    out: dict[Hashable, dict] = {}
    records = read_records(path, kind) if kind else [r for _, r in jsonl_lines(path)]
    for rec in records:
        if not isinstance(rec, dict) or rec.get(MADE_WITH) != made_with:
            continue
        try:
            out[key(rec)] = rec
        except (KeyError, TypeError, ValueError):
            continue
    return out
