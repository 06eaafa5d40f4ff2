"""Text from files reaches the terminal printable: a suite's category, a prompt, a question or a path may hold
control characters or terminal escape sequences (``\\x1b]0;…`` retitles a window, ``\\x1b[2J`` clears the screen,
``\\x1b[8m`` hides what follows). Everything a command prints through ``typer.echo`` — its output and its error
messages — is shown with them escaped (``\\x1b``); newlines and tabs stay. Progress bars write elsewhere.
"""

from __future__ import annotations

import contextlib
import re
from typing import Iterator

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides that reorder what is shown
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control character and escape introducer shown as ``\\xNN`` / ``\\uNNNN``."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


@contextlib.contextmanager
def printable_echo() -> Iterator[None]:
    """While a command runs, ``typer.echo`` of text escapes what :func:`printable` escapes."""
    import typer

    real = typer.echo

    def echo(message=None, file=None, nl: bool = True, err: bool = False, color=None, **kwargs):
        if isinstance(message, str):
            message = printable(message)
        return real(message, file=file, nl=nl, err=err, color=color, **kwargs)

    typer.echo = echo
    try:
        yield
    finally:
        typer.echo = real
