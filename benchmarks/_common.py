"""Shared helpers for the benchmark scripts: timing, alternation, JSON output."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
RESULTS = Path(__file__).with_name("results")


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def alternate(a: Callable[[], object], b: Callable[[], object], reps: int) -> tuple[list[float], list[float]]:
    """Time a and b alternately (a, b, b, a, a, b …) so drift and noise hit both alike."""
    ta, tb = [], []
    for i in range(reps):
        order = (a, b) if i % 2 == 0 else (b, a)
        for fn in order:
            (ta if fn is a else tb).append(timed(fn))
    return ta, tb


def summary(xs: list[float]) -> dict:
    return {"median_s": round(statistics.median(xs), 4), "min_s": round(min(xs), 4), "runs": [round(x, 4) for x in xs]}


def write(name: str, data: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    data = {"benchmark": name, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", **data}
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(data, indent=2))
    return path
