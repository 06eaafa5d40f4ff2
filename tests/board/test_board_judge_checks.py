"""A judge's measured agreement is shown with the images it was measured on (board/judgecheck.py): a scorer card's
``known_agreement.measured_on`` (the mini judges: the mini generator) and each run's own calibration; a ranked
model whose images the deciding judge was never checked on is marked on the page, in the printout and in the
``categories`` table."""

import json

import pandas as pd

from boardkit import invoke, reported_run
from t2i_audit.rundir import atomic_write_json


def _latest(board, table):
    index = json.loads((board / "board.json").read_text())
    return pd.read_parquet(board / index["snapshots"][-1]["files"][table]["path"])


def test_a_model_the_judge_was_never_checked_on_is_marked(tmp_path, monkeypatch, capsys):
    mini = reported_run(tmp_path / "mini", skill=1.0, model="mini", scorers=("mini-pixel",))
    other = reported_run(tmp_path / "other", skill=0.7, model="other-gen", scorers=("mini-pixel",))
    # the other generator's counting images were labelled and the judge calibrated on them
    atomic_write_json(other / "calibration" / "report.json", {"scorers": {"mini-pixel": {"levels": {"prompt": {
        "counting": {"accuracy": 0.9, "kappa": 0.8, "n": 60}}}}}})
    out = tmp_path / "board"
    code, stdout, _ = invoke(["board", mini, other, "--out", out], monkeypatch, capsys)
    assert code == 0, stdout
    cats = _latest(out, "categories").set_index(["run_id", "category"])
    assert cats.loc[("mini", "color_binding"), "judge"] == "mini-pixel"
    assert cats.loc[("mini", "color_binding"), "judge_measured_on"] == "its card: images of mini"
    assert cats.loc[("mini", "color_binding"), "judge_checked"]  # the card's figure was read on mini's images
    assert not cats.loc[("other", "color_binding"), "judge_checked"]  # never on other-gen's
    assert cats.loc[("other", "counting"), "judge_checked"]  # its own calibration covers counting
    assert cats.loc[("other", "counting"), "judge_measured_on"] == "calibrate on other-gen; its card: images of mini"
    assert pd.isna(cats.loc[("other", "overall"), "judge_checked"])  # overall: no single judge
    assert "judge mini-pixel on color_binding: measured on its card: images of mini; never checked on other-gen" \
        in stdout
    assert "judge mini-pixel on counting" not in stdout  # checked on every model there
    html = (out / "index.html").read_text()
    unchecked = sorted(c for c, v in cats.xs("other")["judge_checked"].items() if v is False)
    assert unchecked and "counting" not in unchecked
    assert f'data-unchecked="other"' in html and f"judge unchecked: {', '.join(unchecked)}</span>" in html
    assert 'data-unchecked="mini"' not in html
    assert "color_binding — mini-pixel: measured on its card: images of mini; " in html
