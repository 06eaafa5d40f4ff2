"""The score / scorers / calibrate commands through Typer."""

import json

import pytest
import typer
from typer.testing import CliRunner

from t2i_audit.errors import AuditError
from t2i_audit.scorers.cli import parse_sets, register

from . import tiny_models as tm
from .scenes import draw, make_run, prompt


@pytest.fixture
def app():
    a = typer.Typer()
    register(a)
    return a


def test_scorers_lists_cards(app):
    r = CliRunner().invoke(app, ["scorers", "--json"])
    assert r.exit_code == 0, r.output
    names = {s["name"] for s in json.loads(r.output)}
    assert {"clip", "clip-hf", "vqa-blip", "vqascore", "detect-owlv2"} <= names


def test_parse_sets():
    assert parse_sets(["clip.thresholds.margin=0.05", "clip.model.dtype=float16"], ["vqa-blip=org/repo"]) == {
        "clip": {"thresholds": {"margin": 0.05}, "model": {"dtype": "float16"}},
        "vqa-blip": {"model": {"id": "org/repo"}}}
    with pytest.raises(AuditError, match="expected SCORER.KEY"):
        parse_sets(["margin=1"])


def test_score_then_calibrate_with_local_model(app, tmp_path, model_dir):
    folder = model_dir / "vqa-blip"
    if not (folder / "done").exists():
        (folder / "done").parent.mkdir(parents=True, exist_ok=True)
        (folder / "done").write_text(json.dumps(tm.blip_vqa_model(folder)))
    p = prompt("red", "square", "blue", "circle")
    rd = make_run(tmp_path / "run", [(p, draw([("square", "red", (4, 20, 24, 40))]))] * 2)
    run = CliRunner().invoke(app, ["score", str(rd.root), "-s", "vqa-blip", "--model", f"vqa-blip={folder}",
                                   "--device", "cpu", "--no-progress"])
    assert run.exit_code == 0, run.output
    assert "vqa-blip: 2 scored now, 0 already scored, 0 excluded" in run.output
    again = CliRunner().invoke(app, ["score", str(rd.root), "-s", "vqa-blip", "--model", f"vqa-blip={folder}",
                                     "--device", "cpu", "--no-progress"])
    assert "vqa-blip: nothing new to score; 2 images already scored (all 2 images: passed " in again.output
    sheet = tmp_path / "sheet.csv"
    r = CliRunner().invoke(app, ["calibrate", str(rd.root), "--export-sheet", str(sheet), "--per", "prompt"])
    assert r.exit_code == 0 and "wrote 2 rows" in r.output
    lines = sheet.read_text().splitlines()  # fill the empty label column with 1
    sheet.write_text("\n".join([lines[0]] + [ln + "1" for ln in lines[1:]]) + "\n")
    r = CliRunner().invoke(app, ["calibrate", str(rd.root), "--labels", str(sheet), "--bootstrap", "50"])
    assert r.exit_code == 0, r.output
    assert "vqa-blip: 2 labels matched" in r.output and "prompt   all" in r.output


def test_errors_are_audit_errors(app, tmp_path):
    r = CliRunner().invoke(app, ["score", str(tmp_path / "missing"), "-s", "clip"])
    assert isinstance(r.exception, AuditError) and "run directory not found" in str(r.exception)
    rd = make_run(tmp_path / "run", [(prompt("red", "square"), draw([]))])
    r = CliRunner().invoke(app, ["score", str(rd.root), "-s", "clips", "--device", "cpu"])
    assert isinstance(r.exception, AuditError) and "Did you mean 'clip'" in str(r.exception)
    r = CliRunner().invoke(app, ["calibrate", str(rd.root)])
    assert isinstance(r.exception, AuditError) and "--labels" in str(r.exception)
