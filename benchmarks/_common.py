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


def result_path(name: str, out: "str | Path | None" = None) -> Path:
    """Where a run's figures go: ``out`` (``$BENCH_OUT``) where given, else a new file
    ``results/<name>-<UTC time>.json``. Never the committed ``results/<name>.json`` a rerun would overwrite
    silently: the figures docs/benchmarks.md quotes are replaced only by naming that file on purpose."""
    out = out or os.environ.get("BENCH_OUT")
    if out:
        return Path(out)
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path, k = RESULTS / f"{name}-{stamp}.json", 1
    while path.exists():  # two runs in one second
        path, k = RESULTS / f"{name}-{stamp}-{k}.json", k + 1
    return path


def write(name: str, data: dict, out: "str | Path | None" = None) -> Path:
    data = {"benchmark": name, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", **data}
    path = result_path(name, out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(data, indent=2))
    print(f"wrote {path}")
    return path
