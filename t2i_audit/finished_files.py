"""A file whose stage finished is read whole: the second rule of every reader of a run's records.

A stage that finishes a file (prompts.jsonl, images.jsonl, scores/<scorer>.jsonl) records its line count in
manifest.json under ``finished``; the key is dropped when the stage starts again (``RunDir.mark_finished`` /
``mark_unfinished``). Every reader of a registered kind (:func:`t2i_audit.records.iter_records`) checks the file
against it, so a file cut short — a copy that stopped, a disk that filled, a hand edit — is refused where it ends,
never read as a run with fewer images (the drill's 40.0 % for 37.5 %); ``verify`` lists it under ``complete``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .errors import AuditError
from .safeload import loads_json, read_bytes

FINISHED = "finished"  # manifest.json's key: {run-relative path: lines} of the files whose stage finished them


def finished_lines(path: Path, depth: int) -> Optional[int]:
    """The lines the stage that finished ``path`` recorded in its run's manifest.json (None: none recorded — a
    stage in progress, a run made before stages recorded them, no manifest). Read without the manifest's own
    checks: a damaged manifest is refused by its own reader, not here."""
    parents = Path(path).parents
    if depth >= len(parents):  # a file read on its own, not inside a run folder
        return None
    root = parents[depth]
    try:
        manifest = loads_json(read_bytes(root / "manifest.json"), str(root / "manifest.json"))
    except (AuditError, OSError):
        return None
    table = manifest.get(FINISHED) if isinstance(manifest, dict) else None
    want = table.get(Path(path).relative_to(root).as_posix()) if isinstance(table, dict) else None
    return want if type(want) is int else None


def complete_lines(raw: bytes) -> int:
    """Lines ended by a newline (a torn last line is not one)."""
    return raw.count(b"\n")


def check_whole(path: Path, depth: int, advice: str) -> None:
    """A file whose stage finished holds exactly the lines that stage wrote: one cut short (a copy that stopped,
    a disk that filled, a hand edit) was read as a run with fewer images — 40.0 % instead of 37.5 % — and is
    refused at the line where it ends, with the command that writes it again."""
    want = finished_lines(path, depth)
    if want is None or not Path(path).is_file():
        return
    have = complete_lines(read_bytes(path))
    if have == want:
        return
    rel = Path(path).relative_to(Path(path).parents[depth]).as_posix()
    what = (f"cut short: {have} complete line(s) of the {want} its stage wrote when it finished (truncated after "
            "it was written)" if have < want else
            f"{have} lines, but its stage wrote {want} when it finished (lines added since)")
    raise AuditError(f"{path}:{have + 1}: {what} (manifest.json {FINISHED}.{rel}) — {advice}")
