"""One mini run (4 prompts × 2 images, judged by the mini world's judges) built once per session; its images are
laid out as other tools lay theirs (layouts_from_run.py) and read back with `run --images`."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from t2i_audit import api

SCORERS = ["mini-judge", "mini-pixel"]
STAGES = ["prompts", "generate", "score"]


@pytest.fixture(scope="session")
def mini_run(tmp_path_factory, worker_id) -> Path:
    from tests.conftest import built_once

    def build(folder: Path) -> None:
        cfg = api.make_config(dict(model="mini", prompts=["mini"], limit=4, images_per_prompt=2, scorers=SCORERS,
                                   device="cpu", out=str(folder / "run"), stages=[*STAGES, "report"]))  # a board reads reports
        api.run_audit(cfg, progress=False)

    return built_once(tmp_path_factory, worker_id, "sources-mini-run", build) / "run"


def ingest(images: "Path | str", out: Path, *, n: int = 2, prompts: str = "mini", limit: "int | None" = 4,
           **extra) -> Path:
    """`run --images` through the API, scored as the mini run was."""
    cfg = api.make_config(dict(model=f"images:{images}", prompts=[prompts], images_per_prompt=n, scorers=SCORERS,
                               device="cpu", out=str(out), stages=STAGES, **({"limit": limit} if limit else {}),
                               **extra))
    return Path(api.run_audit(cfg, progress=False))


def verdicts(run: Path) -> dict[str, list[str]]:
    """Every score line of the run, per scorer, in a fixed order (one line per image and question)."""
    return {f.name: sorted(f.read_text(encoding="utf-8").splitlines())
            for f in sorted((Path(run) / "scores").glob("*.jsonl"))}


def cli(*argv) -> int:
    """``t2i-audit ARGV`` in this process (its real entry point): the exit code."""
    from t2i_audit.cli import main

    old, sys.argv = sys.argv, ["t2i-audit", *map(str, argv)]
    try:
        main()
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (links as their targets' names) → its sha256: what must never change."""
    out = {}
    for root, _, files in os.walk(folder):
        for f in files:
            p = Path(root) / f
            out[str(p.relative_to(folder))] = (f"link->{os.readlink(p)}" if p.is_symlink() else "not a file"
                                               if not p.is_file() else hashlib.sha256(p.read_bytes()).hexdigest())
    return out
