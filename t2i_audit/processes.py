"""Accelerate processes for the score and probe stages: one state, each rank's device and threads.

``accelerate launch`` (or ``torchrun``) starts one process per GPU; each works on its share and
the main process merges (the pattern of generate.py). Transport is Accelerate's own: a barrier
(``wait_for_everyone``) and ``gather_object`` for small counts; records and arrays travel as files
in the run directory, which therefore must be on a filesystem every node sees.
"""

from __future__ import annotations

import os


def process_state(device: str):
    """The run's ``PartialState`` (a shared singleton: the first call decides its settings).

    ``cpu=True`` on CPU: a plain ``PartialState()`` under torchrun makes every rank believe it is
    alone (measured: both ranks did all the work)."""
    from accelerate import PartialState

    return PartialState(cpu=str(device).split(":")[0] == "cpu")


def rank_device(state, device: str) -> str:
    """``cuda`` means this rank's own GPU; an explicit ``cuda:N`` or ``cpu`` is kept."""
    return f"cuda:{state.local_process_index}" if device == "cuda" else device


def share_cpu(state, device: str) -> None:
    """On CPU keep processes × threads ≤ cores on this node (2 processes × 2 threads on 2 cores
    ran 40× slower); never more threads than already set (``OMP_NUM_THREADS`` is kept, and CPU
    float results depend on the thread count)."""
    if str(device).split(":")[0] != "cpu" or state.num_processes == 1:
        return
    import torch

    local = int(os.environ.get("LOCAL_WORLD_SIZE", state.num_processes))
    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) // max(1, local))))


def gather(state, obj) -> list:
    """``[obj of rank 0, obj of rank 1, …]`` on every rank (``[obj]`` in a single process)."""
    if state.num_processes == 1:
        return [obj]
    from accelerate.utils import gather_object

    return gather_object([obj])
