"""Helpers of the board tests: reported synthetic runs (tests/report/synth.py: real run files, no model) and
the CLI as a user runs it."""

import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))

from synth import make_prompts, make_run  # noqa: E402

SETTINGS = {"steps": 20, "guidance": 7.0, "size": 48, "dtype": "float32", "device": "cpu", "batch_size": 4,
            "scorers": None, "stages": ["prompts", "generate", "score", "report"], "out": "somewhere"}
PROMPTS = make_prompts(n_binding=12, n_rel=8, n_count=6)


def reported_run(root: Path, *, skill: float, model: str, seed: int = 0, prompts=None, probes: bool = False,
                 scorers=("clip-foil", "vqa-blip"), **settings) -> Path:
    from t2i_audit.report import render_report

    run = make_run(root, prompts=prompts if prompts is not None else PROMPTS, skill=skill, model=model, seed=seed,
                   probes=probes, black=1, scorers=scorers, config={**SETTINGS, **settings})
    render_report(run, progress=False)
    return run


def invoke(argv, monkeypatch, capsys) -> tuple:
    """(exit code, stdout, stderr) of ``t2i-audit ARGV`` through the real entry point; an exception other than
    SystemExit (what a user would see as a traceback) propagates and fails the test."""
    from t2i_audit import cli

    monkeypatch.setattr(sys, "argv", ["t2i-audit", *map(str, argv)])
    monkeypatch.setenv("COLUMNS", "300")
    code = 0
    try:
        cli.main()
    except SystemExit as e:
        code = e.code if e.code is not None else 0
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def snapshot(root: Path) -> dict:
    root = Path(root)
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}
