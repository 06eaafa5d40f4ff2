"""Local paths in what users publish (issue 42): a run report, a comparison, a board (page, card, tables, data) and a
track page with its curves show the machine's paths relative to the published folder, ``~`` for the home
directory — never an absolute path (the model folder, the checkpoints, the command line, the runs)."""

from __future__ import annotations

import html
import os
from pathlib import Path

import pandas as pd
import pytest

from allpages import published

from t2i_audit.shareable import shareable, shareable_path


def _text(path: Path) -> str:
    if path.suffix == ".parquet":
        return pd.read_parquet(path).to_json(orient="records", default_handler=str)
    if path.suffix in (".png", ".jpg", ".jpeg", ".webp"):
        return ""
    return html.unescape(path.read_text(errors="replace"))


def _local_prefixes(base: Path) -> list[str]:
    home = os.path.expanduser("~")
    repo = Path(__file__).resolve().parents[2]
    return [str(base)] + [p for p in (home, str(repo)) if p not in ("/", "")]


@pytest.mark.parametrize("kind", ("report", "compare", "board", "track"))
def test_published_files_hold_no_absolute_local_path(all_pages, kind):
    base = all_pages["report"].parents[2]  # the folder every page of the fixture was made in
    files = published(all_pages)[kind]
    assert files
    leaks = {f.relative_to(base).as_posix(): [p for p in _local_prefixes(base) if p + "/" in _text(f) or
                                              _text(f).rstrip().endswith(p)]
             for f in files}
    assert {f: p for f, p in leaks.items() if p} == {}


def test_what_the_pages_show_instead(all_pages):
    report = _text(all_pages["report"])
    # the manifest's model folder beside the run, and the command line with the program's name alone
    assert "../models/a" in report and '["t2i-audit", "run", "--model", "../models/a", "--out", "."]' in report
    track = _text(all_pages["track"])
    assert "../training/base" in track  # the track's base model folder (track.json keeps it absolute, for reruns)
    curves = _text(all_pages["track"].parent / "curves.json")
    assert '"source": "../training/checkpoint-10"' in curves
    board = _text(all_pages["board"].parent / "board.json")
    assert '"model": "../models/a"' in board


def test_shareable_paths_rule(tmp_path):
    root = tmp_path / "runs" / "r1"
    home = os.path.expanduser("~")
    assert shareable_path(str(root), root) == "."
    assert shareable_path(str(root / "images" / "a.png"), root) == "images/a.png"
    assert shareable_path(str(tmp_path / "models" / "sd"), root) == "../../models/sd"
    if home != "/" and not str(tmp_path).startswith(home):
        assert shareable_path(os.path.join(home, ".cache", "hf"), root) == "~/.cache/hf"
    import t2i_audit

    pkg = Path(t2i_audit.__file__).resolve().parent
    assert shareable_path(str(pkg / "mini" / "weights" / "generator"), root) == "t2i_audit/mini/weights/generator"
    got = shareable({"command": ["/opt/venv/bin/t2i-audit", "run", "--out", str(root)], "n": 3, "url": "https://h.co/a/b",
                     "note": f"loaded from {tmp_path / 'models' / 'sd'}, then 1/8 of a/b (see {root / 'x'})."}, root)
    assert got == {"command": ["t2i-audit", "run", "--out", "."], "n": 3, "url": "https://h.co/a/b",
                   "note": "loaded from ../../models/sd, then 1/8 of a/b (see x)."}
    # a source reference's path (run --images DIR is the model images:DIR); a URL after a scheme stays as it is
    assert shareable(f"images:{tmp_path / 'pics'} and endpoint:http://127.0.0.1:8000/gen", root) == \
        "images:../../pics and endpoint:http://127.0.0.1:8000/gen"
