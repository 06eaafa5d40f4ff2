"""``t2i-audit`` commands in one process (one start-up, one process group), with 2-row activation
chunks so that a dozen prompts make several part files for two processes to share (the chunk size
is the same for every process count, as in real runs).

    python sharded_cli.py run … :: probe RUN --denoiser
    torchrun --nproc_per_node 2 sharded_cli.py run … :: probe RUN --denoiser

The one-process audit runs in the test's own process (``small_parts`` + ``run_commands``): the same commands,
without a second start-up.
"""

import os
import sys
from contextlib import contextmanager

import numpy as np


@contextmanager
def small_parts(part_log: str | None):
    """2-row chunks, and which process wrote which part file as "<rank> <path>" lines in ``part_log``; undone after."""
    from t2i_audit.probes.capture import activations, denoiser

    chunks, savez = (activations.CHUNK, denoiser.CHUNK), np.savez

    def logged_savez(path, *args, **kwargs):
        savez(path, *args, **kwargs)
        with open(part_log, "a") as f:
            f.write(f"{os.environ.get('RANK', '0')} {path}\n")

    activations.CHUNK = denoiser.CHUNK = 2
    if part_log:
        np.savez = logged_savez
    try:
        yield
    finally:
        activations.CHUNK, denoiser.CHUNK = chunks
        np.savez = savez


def run_commands(argv: list[str]) -> None:
    """Each ``::``-separated command through the Typer app; an error raises (the exit status says so)."""
    from t2i_audit.cli import app

    command: list[str] = []
    for arg in [*argv, "::"]:
        if arg != "::":
            command.append(arg)
            continue
        app(command, standalone_mode=False)
        command = []


if __name__ == "__main__":
    with small_parts(os.environ.get("PART_LOG")):
        run_commands(sys.argv[1:])
