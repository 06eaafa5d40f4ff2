"""Errors a user can act on. The CLI prints them without a traceback and exits with code 2."""

from __future__ import annotations

import difflib
from typing import Iterable


class AuditError(Exception):
    """A problem with the user's input or files: message names the place and the reason."""

    exit_code = 2


class SuiteError(AuditError):
    """A prompt suite failed validation. ``problems`` lists every problem found."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    choices = sorted(set(choices))
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"{hint} Known: {', '.join(choices)}."
