"""Fixtures of the board tests (helpers in boardkit.py)."""

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from boardkit import reported_run  # noqa: E402


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict:
    """good / bad: two models, same settings and seeds; seed1: another model at another base seed; g3: the good
    model at guidance 3."""
    base = tmp_path_factory.mktemp("board-runs")
    return {"good": reported_run(base / "good", skill=1.0, model="model-good", probes=True),
            "bad": reported_run(base / "bad", skill=0.45, model="model-bad"),
            "seed1": reported_run(base / "seed1", skill=0.8, model="model-mid", seed=1),
            "g3": reported_run(base / "g3", skill=0.9, model="model-good", guidance=3.0)}


@pytest.fixture
def own_runs(runs, tmp_path) -> dict:
    """Copies a test may damage or change."""
    return {k: Path(shutil.copytree(v, tmp_path / "runs" / k)) for k, v in runs.items()}
