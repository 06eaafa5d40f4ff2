"""Library output a user cannot act on, silenced where our own calls cause it (scoped: each context restores what it
changed, so a lab that imports t2i_audit keeps its own logging and bars):

* diffusers' "No LoRA keys associated to CLIPTextModel … open an issue" when a LoRA trained on the UNet alone is
  applied (what each LoRA reached is recorded per component instead: variants/load.py ``layers``);
* transformers' "Writing model shards" bars while tiny models are saved on a first run;
* a library's hint that points at nothing the user has ("check out the root cause in the stacktrace above": no
  stack trace is shown, by design) — :func:`library_message` keeps the message and drops the hint.
"""

from __future__ import annotations

import contextlib
import logging
import re
from typing import Iterator

LIBRARIES = ("diffusers", "transformers", "peft")


@contextlib.contextmanager
def library_logs(level: int = logging.ERROR, names=LIBRARIES) -> Iterator[None]:
    """The libraries' loggers at ``level`` (warnings below it dropped) while the block runs; restored after."""
    loggers = [_configured(n) for n in names]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(max(level, lg.getEffectiveLevel()))
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, before):
            lg.setLevel(lvl)


def _configured(name: str) -> logging.Logger:
    """The library's root logger once the library has configured it: transformers and diffusers set its level on
    their first log call, which would undo a level set before it."""
    import importlib

    try:
        return importlib.import_module(f"{name}.utils.logging")._get_library_root_logger()
    except (ImportError, AttributeError):  # peft logs through the standard logging module
        return logging.getLogger(name)


@contextlib.contextmanager
def no_library_bars() -> Iterator[None]:
    """transformers' and diffusers' own tqdm bars off while the block runs (saving, loading); restored after."""
    from diffusers.utils import logging as dl
    from transformers.utils import logging as tl

    was = [(m, m.is_progress_bar_enabled()) for m in (tl, dl)]
    for m, _ in was:
        m.disable_progress_bar()
    try:
        yield
    finally:
        for m, on in was:
            if on:
                m.enable_progress_bar()


# hints that send the user somewhere they cannot go from a one-line error
_HINTS = re.compile(r"\s*(Please check out the root cause in the stacktrace above\.?"
                    r"|Otherwise, open an issue[^.]*\.?"
                    r"|Please open an issue[^.]*\.?)", re.I)


def library_message(e: BaseException) -> str:
    """A library exception's message for a one-line error: its hints that do not apply here removed."""
    return " ".join(_HINTS.sub("", str(e)).split()) or type(e).__name__
