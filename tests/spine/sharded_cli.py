"""``t2i-audit`` commands in one process (one start-up, one process group), with 2-row activation
chunks so that a dozen prompts make several part files for two processes to share (the chunk size
is the same for every process count, as in real runs).

    python sharded_cli.py run … :: probe RUN --denoiser
    torchrun --nproc_per_node 2 sharded_cli.py run … :: probe RUN --denoiser
"""

import os
import sys

import numpy as np

from t2i_audit.probes.capture import activations, denoiser

activations.CHUNK = denoiser.CHUNK = 2

if os.environ.get("PART_LOG"):  # which process wrote which part file: "<rank> <path>" lines
    savez = np.savez

    def logged_savez(path, *args, **kwargs):
        savez(path, *args, **kwargs)
        with open(os.environ["PART_LOG"], "a") as f:
            f.write(f"{os.environ.get('RANK', '0')} {path}\n")

    np.savez = logged_savez

from t2i_audit.cli import app  # noqa: E402

command: list[str] = []
for arg in [*sys.argv[1:], "::"]:
    if arg != "::":
        command.append(arg)
        continue
    app(command, standalone_mode=False)  # raises on an error: the exit status says so
    command = []
