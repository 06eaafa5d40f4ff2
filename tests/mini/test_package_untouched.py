"""The tool never writes into its own installed package (issue 37 point 5: `mini eval-generator` / `eval-judges`
rewrote t2i_audit/mini/weights/*/card.json by default; with an editable install that dirtied the checkout). The
sha256 of every file of the package is the same after the commands as before; `--write` into the package is
refused before any work, and writes a card the user owns."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from t2i_audit import cli
from t2i_audit.mini.cli import WEIGHTS

from ..drills.test_folder_identity import _cli

PACKAGE = Path(cli.__file__).resolve().parent


def _package_sha256() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(PACKAGE.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def test_mini_evaluations_leave_the_package_byte_identical(tmp_path, monkeypatch, capsys):
    before = _package_sha256()
    assert any(k.endswith("weights/generator/card.json") for k in before)
    code, out, err = _cli(["mini", "eval-judges", "--n", "2"], tmp_path, monkeypatch, capsys)
    assert code == 0 and out.startswith("pixel "), err
    code, out, err = _cli(["mini", "eval-generator", "--limit", "1", "--samples", "1", "--steps", "2"],
                          tmp_path, monkeypatch, capsys)
    assert code == 0 and ('"train/all"' in out or '"heldout/all"' in out), err
    for argv in (["mini", "eval-judges", "--n", "2", "--write"],
                 ["mini", "eval-generator", "--limit", "1", "--samples", "1", "--write"],
                 ["mini", "render", "a red circle", "--out", WEIGHTS / "x.png"],
                 ["mini", "train-judge", "--smoke", "--out", WEIGHTS / "judge"]):
        code, out, err = _cli(argv, tmp_path, monkeypatch, capsys)
        assert code == 2 and "inside the installed t2i-audit package" in err and "Traceback" not in err, (argv, err)
    assert _package_sha256() == before


def test_write_goes_to_a_judge_of_ones_own(tmp_path, monkeypatch, capsys):
    mine = tmp_path / "my-judge"
    shutil.copytree(WEIGHTS / "judge", mine)
    code, out, err = _cli(["mini", "eval-judges", "--judge", mine, "--n", "2", "--write"], tmp_path, monkeypatch, capsys)
    assert code == 0, err
    card = json.loads((mine / "card.json").read_text())
    assert set(card["accuracy"]["per_category"]) >= {"shape", "color"} and card["accuracy"]["n_per_category"] == 2
