"""Early checks of a command's input paths, made before any work: a missing path, an empty file or
an empty folder, a FIFO, a device (``/dev/zero``) or a file past the size bound is named with the option it
came from (exit 2), never met later as a traceback, a read that never ends, or silently skipped. The property
tests run every command through them (tests/spine/test_command_properties.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from .errors import AuditError


def require_input(path: "Path | str", option: str, kind: str = "file") -> Path:
    """``path`` as given to ``option``: an existing, non-empty regular file of bounded size
    (``kind="file"``, :func:`t2i_audit.safeload.regular_file`) or folder (``kind="folder"``); refused with the
    option, the path and what is wrong otherwise."""
    from .safeload import regular_file

    p = Path(path)
    if not p.exists():
        raise AuditError(f"{option} {p}: {kind} not found")
    if kind == "folder":
        if not p.is_dir():
            raise AuditError(f"{option} {p}: not a folder")
        if next(p.iterdir(), None) is None:
            raise AuditError(f"{option} {p}: empty folder")
    else:
        if p.is_dir():
            raise AuditError(f"{option} {p}: is a folder; give a file")
        if regular_file(p, option).st_size == 0:
            raise AuditError(f"{option} {p}: empty file")
    return p


def require_inputs(paths: Optional[Iterable["Path | str"]], option: str, kind: str = "file") -> list[Path]:
    """:func:`require_input` for each of a repeatable option's values (none given: nothing to check)."""
    return [require_input(p, option, kind) for p in paths or ()]


def require_suite(path: "Path | str", option: str = "--prompts") -> Path:
    """A suite given to ``option``: a file (:func:`require_input`) or a shipped suite's bare name (``mini``).
    Returns the file read; the name as given stays the user's (e.g. for default output names)."""
    from .suite import resolve_suite_path, shipped_hint

    p = resolve_suite_path(path)
    if not p.exists():  # say what works from any folder: the shipped suites by name
        raise AuditError(f"{option} {p}: file not found{shipped_hint(path)}")
    return require_input(p, option)
