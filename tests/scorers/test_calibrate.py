"""Calibration numbers against hand-computed values; threshold fit; labelling sheet; bad labels."""

import csv
import math

import pytest
from scipy.stats import kendalltau

from t2i_audit.errors import AuditError
from t2i_audit.rundir import append_jsonl
from t2i_audit.scorers.base import Scorer, ScoreItem
from t2i_audit.scorers.calibrate import calibrate, export_sheet
from t2i_audit.scorers.registry import get_card, load_card_file

from .scenes import draw, make_run, prompt

# six hand-checked cases, four times over (24 prompts): enough labels for a κ under the small-sample rule
# (stats.MIN_KAPPA_N), and accuracy, κ and ρ are unchanged by the repetition
REPEAT = 4
VERDICTS = [True, True, True, False, False, False] * REPEAT
VALUES = [0.9, 0.8, 0.7, 0.4, 0.3, 0.2] * REPEAT
LABELS = [1, 1, 0, 1, 0, 0] * REPEAT
N = len(LABELS)


@pytest.fixture
def run(tmp_path):
    # 24 different pictures (a colour-shape pair each): the CIs resample prompt groups, and prompts showing one
    # scene would be one group (scenes.prompt_groups)
    colors, shapes = ("red", "green", "blue", "yellow", "purple", "orange"), ("square", "circle", "cube", "star")
    ps = [prompt(colors[i % 6], shapes[i // 6], pid=f"p{i:012d}", category="color" if i % 6 < 3 else "spatial")
          for i in range(N)]
    ps.append(prompt("red", "square", pid="p" + "9" * 12))  # a flagged image: not in the sheet
    rd = make_run(tmp_path / "run", [(p, draw([("square", "red", (2, 2, 20, 20))])) for p in ps], flags={N: ["nsfw"]})
    s = Scorer(get_card("vqa-blip"))
    recs = []
    for p, img, v, x in zip(ps, rd.read_images(), VERDICTS, VALUES):
        it = ScoreItem(p, img)
        recs.append(s.record(it, "question", question_id="q1", value=x, verdict=v))
        recs.append(s.prompt_record(it, v, [], value=x))
    append_jsonl(rd.scores("vqa-blip"), recs)
    return rd


def write_labels(path, rows, header=("prompt_id", "sample", "question_id", "label")):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_agreement_matches_hand_computed(run, tmp_path):
    labels = write_labels(tmp_path / "l.csv", [(f"p{i:012d}", 0, "", lab) for i, lab in enumerate(LABELS)])
    rep = calibrate(run, labels, n_boot=200)
    m = rep["scorers"]["vqa-blip"]["levels"]["prompt"]["all"]
    assert m["n"] == N and m["n_prompts"] == N and "too_few" not in m
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["kappa"] == pytest.approx(1 / 3)  # po 4/6, pe 1/2
    # tau-b of the six cases is 7 / sqrt(15 * 9) (C=8, D=1, 6 ties in y); repeated, the ties change it: scipy's
    assert m["kendall_tau"] == pytest.approx(kendalltau(VALUES, LABELS)[0])
    assert m["spearman_rho"] == pytest.approx(10.5 / math.sqrt(17.5 * 13.5))  # ranks repeat linearly: unchanged
    lo, hi = m["accuracy_ci"]
    assert 0 <= lo <= m["accuracy"] <= hi <= 1
    color = rep["scorers"]["vqa-blip"]["levels"]["prompt"]["color"]
    # 12 labelled images: a rate (≥ 10) but not a κ (≥ 20), which is stored as None with the reason
    assert color["n"] == 12 and color["accuracy"] == pytest.approx(2 / 3) and color["kappa"] is None
    assert color["too_few"]["kappa"].startswith("too few: 12 labelled images, 12 prompts; a κ needs ≥ 20")
    assert (run.root / "calibration" / "report.json").exists()


def test_yes_no_labels_and_image_column(run, tmp_path):
    imgs = run.read_images()
    rows = [(imgs[i]["path"], "yes" if lab else "no") for i, lab in enumerate(LABELS)]
    labels = write_labels(tmp_path / "l.csv", rows, header=("image", "label"))
    m = calibrate(run, labels, n_boot=0, write=False)["scorers"]["vqa-blip"]["levels"]["prompt"]["all"]
    assert m["accuracy"] == pytest.approx(4 / 6) and m["accuracy_ci"] == (None, None)


def test_fit_threshold_by_cv_writes_card_copy(run, tmp_path):
    labels = write_labels(tmp_path / "l.csv", [(f"p{i:012d}", 0, "q1", lab) for i, lab in enumerate(LABELS)])
    rep = calibrate(run, labels, fit_threshold=True, n_boot=0)
    t = rep["scorers"]["vqa-blip"]["threshold"]
    # accuracy 5/6 at both 0.35 and 0.75; the tie goes to the cut closest to the old 0.5
    assert t["threshold"] == pytest.approx(0.35) and t["train_accuracy"] == pytest.approx(5 / 6)
    assert t["previous"] == 0.5 and t["folds"] == 5 and 0 <= t["cv_accuracy"] <= 1
    (card,) = load_card_file(t["card"])
    assert card["name"] == "vqa-blip" and card["thresholds"]["p_yes"] == pytest.approx(0.35)
    assert card["model"]["id"] == "Salesforce/blip-vqa-base" and card["calibration"]["labels_n"] == N


def test_bad_labels(run, tmp_path):
    with pytest.raises(AuditError, match="labels file not found"):
        calibrate(run, tmp_path / "nope.csv")
    with pytest.raises(AuditError, match=r"needs columns 'label'.*found prompt_id, verdict"):
        calibrate(run, write_labels(tmp_path / "a.csv", [("p1", 1)], header=("prompt_id", "verdict")))
    with pytest.raises(AuditError, match=r"b\.csv:3: label 'maybe' is not 1/0"):
        calibrate(run, write_labels(tmp_path / "b.csv", [("p000000000000", 0, "", 1), ("p000000000001", 0, "", "maybe")]))
    with pytest.raises(AuditError, match=r"c\.csv:2: image 'x.png' is not in"):
        calibrate(run, write_labels(tmp_path / "c.csv", [("x.png", 1)], header=("image", "label")))
    with pytest.raises(AuditError, match=r"no records for scorer 'clip' \(have: vqa-blip\)"):
        calibrate(run, write_labels(tmp_path / "d.csv", [("p000000000000", 0, "", 1)]), scorers=["clip"])


def test_export_sheet(run, tmp_path):
    n = export_sheet(run, tmp_path / "sheet.csv")
    rows = list(csv.DictReader(open(tmp_path / "sheet.csv")))
    assert n == len(rows) == N * (1 + 2)  # flagged image left out; prompt row + 2 questions
    assert rows[0]["kind"] == "prompt" and rows[0]["question"].startswith('Does the image show "a photo of a red')
    assert rows[1]["question"] == "Is there a square?" and rows[1]["label"] == ""
    assert (run.root / rows[0]["image"]).exists()
    # a filled sheet is a valid labels file
    for r, lab in zip(rows, [1, 1, 0] * N):
        r["label"] = lab
    with open(tmp_path / "filled.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    rep = calibrate(run, tmp_path / "filled.csv", n_boot=0, write=False)["scorers"]["vqa-blip"]
    assert rep["levels"]["prompt"]["all"]["n"] == N and rep["levels"]["question"]["all"]["n"] == N


def test_constant_labels_leave_kappa_undefined_and_the_command_says_what_it_changes(run, tmp_path, monkeypatch,
                                                                                    capsys):
    """Issue 37: every label "yes" gave κ 0.000 — a 97 %-accurate judge then read as at chance and left the
    headline. κ is undefined on constant labels (stored None with the reason, printed "undefined"), and the command
    ends by saying which scorer decides each category afterwards and why a calibration was set aside."""
    import sys

    from t2i_audit import cli

    labels = write_labels(tmp_path / "yes.csv", [(f"p{i:012d}", 0, "", 1) for i in range(N)])
    m = calibrate(run, labels, n_boot=50, write=False)["scorers"]["vqa-blip"]["levels"]["prompt"]["all"]
    assert m["kappa"] is None and m["kappa_ci"] == (None, None)
    assert m["undefined"]["kappa"] == "undefined: every label is 1"
    assert m["accuracy"] == pytest.approx(sum(VERDICTS) / N)  # a rate stays defined
    monkeypatch.setattr(sys, "argv", ["t2i-audit", "calibrate", str(run.root), "--labels", str(labels),
                                      "--bootstrap", "50"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    out = capsys.readouterr().out
    assert exited.value.code in (0, None), out
    assert "kappa=undefined" in out and "(κ undefined: every label is 1)" in out and "kappa=0.000" not in out
    tail = out[out.index("which scorer decides each category"):].splitlines()
    assert tail[1].startswith("  color: vqa-blip (") and tail[1].endswith("— unchanged"), tail


def test_help_states_the_labels_measured_agreement_needs():
    from typer.testing import CliRunner

    from t2i_audit.cli import app
    from t2i_audit.deciding import MIN_LABELS, MIN_LABELS_OVER_CARD

    text = " ".join(CliRunner().invoke(app, ["calibrate", "--help"]).output.replace("│", " ").split())
    assert f"{MIN_LABELS_OVER_CARD} labels ({MIN_LABELS} where the scorer's card has no measured agreement)" in text
