"""`t2i-audit` in a process of its own without paying the start-up again: forked from a server process that
imported torch, diffusers and the CLI once (multiprocessing's forkserver: a fresh interpreter, started once per
test process, that forks a child per command). Each child is a real process with its own pid, files and locks,
killed by a real SIGKILL — what the kill and lock tests are about — for well under a second of start-up instead of
the ~9 CPU-s that importing torch and diffusers costs a `python -m t2i_audit` here.

Differences from `python -m t2i_audit`, none of them a property these tests check: the modules are imported
before the command line is read, and the child leaves by os._exit (t2i-audit registers no atexit handler and
joins its own writer threads). Environment variables read at import time (HF_HOME …) are the test process's.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import sys
from pathlib import Path

# what `t2i-audit run` on tiny-sd with the tiny CLIP scorer imports before its first image (diffusers and
# transformers import their models lazily: the pipeline's and the scorer's modules are named here)
PRELOAD = ["torch", "t2i_audit.cli", "t2i_audit.api", "t2i_audit.generate", "t2i_audit.scorers.stage",
           "t2i_audit.scorers.clip", "t2i_audit.scorers.clip_models", "t2i_audit.tiny", "t2i_audit.tiny.scorers",
           "diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion", "diffusers.schedulers",
           "transformers.models.clip.modeling_clip", "open_clip", "scipy.stats"]

_context = None


def _ctx():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
        atexit.register(_stop)
    return _context


def _stop() -> None:
    """End the server and wait for it, so that its CPU time (and its children's) is counted in this process's, as
    a subprocess's is (``time pytest …`` sees it), and no server outlives the tests."""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)  # private, since Python 3.8; only a clean-up
    if stop is not None:
        stop()


def _main(argv: list[str], cwd: str, env: dict, log: str) -> None:
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = ["t2i-audit", *argv]
    from t2i_audit.cli import main

    main()  # SystemExit(code) → the child's exit status, as for `python -m t2i_audit`


def start(argv, *, cwd: Path | str | None = None, env: dict | None = None,
          log: Path | str = os.devnull) -> multiprocessing.process.BaseProcess:
    """``t2i-audit ARGV`` started in a child process; its stdout and stderr appended to ``log``. The handle's
    ``pid``, ``kill()`` (SIGKILL), ``join()``, ``exitcode`` (−9 after SIGKILL) are those of a real process."""
    proc = _ctx().Process(target=_main, args=([str(a) for a in argv], str(cwd or os.getcwd()),
                                              dict(os.environ if env is None else env), str(log)))
    proc.start()
    return proc


def run(argv, **kw) -> int:
    """``t2i-audit ARGV`` to its end in a child process: its exit status."""
    proc = start(argv, **kw)
    proc.join()
    return proc.exitcode
