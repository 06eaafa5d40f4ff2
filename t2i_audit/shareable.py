"""Paths in what users publish: a report, board, track page or compare page is meant to be shared, so it shows the
paths of the machine that made it relative to the folder being published (``../models/sd``), ``~`` for the home
directory, and the package's own files by the package's name (``t2i_audit/mini/weights/generator``) — never an
absolute local path. The run's own manifest.json keeps absolute paths: ``resume_argv`` must work from any directory
(README, "Resuming"); only what is rendered or copied for others goes through :func:`shareable`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

# an absolute POSIX path inside a string: "/" starting a token (not inside a word, a URL or a relative path), or right
# after a source prefix (``images:/abs``, ``local:/abs``: one "/", where a URL's "://" has two), up to whitespace or a
# quote; trailing punctuation of the sentence around it is not part of it
_ABSOLUTE = re.compile(r"(?<![\w.~/:\\-])/[^\s\"'<>`]+|(?<=[a-z]:)/(?!/)[^\s\"'<>`]+")
_TRAILING = ".,;:)]}"
PACKAGE = Path(__file__).resolve().parent


def _home() -> str:
    return os.path.normpath(os.path.expanduser("~"))


def shareable_path(path: str, root: Path) -> str:
    """``path`` as a reader of the folder ``root`` should see it; see the module's rule. A relative ``path`` is
    taken from the working directory, as the command that was given it took it (`compare runs/a runs/b`)."""
    p = os.path.normpath(os.path.abspath(path))
    root_s = os.path.normpath(os.path.abspath(root))
    home = _home()

    def under(base: str) -> bool:
        return p == base or p.startswith(base.rstrip("/") + "/")

    if under(root_s):
        return os.path.relpath(p, root_s)
    if under(str(PACKAGE)):
        return PACKAGE.name + p[len(str(PACKAGE)):]
    common = os.path.commonpath([p, root_s])
    # a folder beside the published one (a model next to the runs): relative; else the home directory as ~
    if common != "/" and not (under(home) and len(common) <= len(home)):
        return os.path.relpath(p, root_s)
    if under(home) and home != "/":
        return "~" + p[len(home):]
    return os.path.relpath(p, root_s)


def _in_text(text: str, root: Path) -> str:
    def one(m: re.Match) -> str:
        token = m.group(0)
        tail = ""
        while token and token[-1] in _TRAILING:
            token, tail = token[:-1], token[-1] + tail
        return (shareable_path(token, root) if len(token) > 1 else token) + tail

    return _ABSOLUTE.sub(one, text) if "/" in text else text


def _program(argv0: str) -> str:
    """The command's program as a user types it: ``t2i-audit`` also for ``python -m t2i_audit`` (whose argv[0] is
    the package's __main__.py)."""
    name = os.path.basename(argv0)
    return "t2i-audit" if name == "__main__.py" and Path(argv0).resolve().parent == PACKAGE else name


def shareable(value: Any, root: Path) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every absolute path in its strings made shareable
    for ``root``, the folder being published; a ``command`` list's program (its first item) by its name alone."""
    if isinstance(value, str):
        return _in_text(value, root)
    if isinstance(value, dict):
        out = {k: shareable(v, root) for k, v in value.items()}
        cmd = value.get("command")
        if isinstance(cmd, list) and cmd and isinstance(cmd[0], str) and os.path.isabs(cmd[0]):
            out["command"] = [_program(cmd[0])] + out["command"][1:]
        return out
    if isinstance(value, (list, tuple)):
        return type(value)(shareable(v, root) for v in value)
    return value
