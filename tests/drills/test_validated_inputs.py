"""Every file the tool reads back is validated (issue 26, items 3–6): fitted probe files, label sheets,
a run's images for the labelling page; and numbers from too few items are printed as "too few".

Each case is the drill's reproducer: exit 2 with the file and the place, never a traceback, never a
``nan`` risk, nothing written; or, where the input is fine, the honest result.
"""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from t2i_audit import stats
from t2i_audit.prompts import twin_group
from t2i_audit.scenes import groups_by_id
from t2i_audit.errors import AuditError

from .test_malformed_corpus import _invoke, _snapshot

REPO = Path(__file__).resolve().parents[2]


def _clean_exit(code, err, fragments):
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: "), err
    for f in fragments:
        assert f in err, (f, err)


# --- a run probed with `probe --early`: one image per prompt, 8 prompts (as the drill's run), all of them colour --
# --- binding: the folds are twin groups, and a category needs 3 of them to be fitted (here 4) -------------------


@pytest.fixture(scope="module")
def early_run(tmp_path_factory):
    """`run -n 1` on 8 mini-world prompts, then `probe --early` through the CLI (what the drill typed),
    with every warning recorded: before, 60 RuntimeWarnings reached the user."""
    import sys

    from t2i_audit import api, cli

    root = tmp_path_factory.mktemp("early1")
    binding = [r for r in api.expand_suites([str(REPO / "prompts/mini.yaml")], limit=24)
               if r["category"] == "color_binding"]
    assert len(binding) == 8 and len({twin_group(r) for r in binding}) == 4
    (root / "binding.jsonl").write_text("".join(json.dumps(r) + "\n" for r in binding))
    cfg = api.make_config(dict(model="mini", prompts=[str(root / "binding.jsonl")], images_per_prompt=1,
                               stages=["prompts", "generate", "score"], out=str(root / "run"), device="cpu"))
    api.run_audit(cfg, progress=False)
    mp = pytest.MonkeyPatch()
    mp.setattr(sys, "argv", ["t2i-audit", "probe", str(root / "run"), "--early", "--at", "0.2", "--bootstrap", "20"])
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        warnings.simplefilter("always")
        try:
            cli.main()
        except SystemExit as e:
            assert e.code in (0, None), err.getvalue()
    mp.undo()
    return root / "run", out.getvalue(), err.getvalue(), caught


def test_early_on_one_image_per_prompt_says_why_and_warns_nothing(early_run):
    run, out, err, caught = early_run
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert "held-out seeds not evaluated (one image per prompt" in out, out
    saved = json.loads((run / "probes" / "early.json").read_text())
    fitted = [r for r in saved["categories"].values() if "steps" in r]
    assert fitted, saved["categories"]  # color_binding: 8 compositions of 4 twin groups, both outcomes
    for r in fitted:
        for st in r["steps"].values():
            assert st["families"]["probe"]["seeds"]["skipped"].startswith("one image per prompt")
            # 8 images of 8 compositions: an AUROC is stored as "too few", not a number, and so printed
            a = st["families"]["probe"]["compositions"]["auroc"]
            assert a["auroc"] is None and a["too_few"].startswith("too few: 8 images"), a
    assert "AUROC too few" in out and "nan" not in out.lower()


def test_probe_early_at_empty_is_a_located_error(early_run, tmp_path, monkeypatch, capsys):
    # before: ValueError traceback (max() of an empty list) after the pipeline loaded
    run = early_run[0]
    code, err = _invoke(["probe", str(run), "--early", "--at", ""], tmp_path, monkeypatch, capsys)
    _clean_exit(code, err, ["--at ''", "comma-separated fractions"])


def test_the_real_early_probes_file_loads(early_run):
    from t2i_audit.probes.probe_files import load_early_probes

    fitted = load_early_probes(early_run[0])
    assert fitted["categories"] and fitted["settings"]["steps"] == 20


def _damaged_early(src: Path, dst: Path, damage) -> Path:
    """A copy of the probed run whose early_probes.json is damaged."""
    import shutil

    shutil.copytree(src, dst)
    data = json.loads((src / "probes" / "early_probes.json").read_text())
    text = damage(data)
    (dst / "probes" / "early_probes.json").write_text(text if isinstance(text, str) else json.dumps(data))
    return dst


def _first_probe(d):
    cat = next(iter(d["categories"].values()))
    return cat[next(iter(cat))]


EARLY_DAMAGE = {
    # before: risks of NaN / inf ranked and printed as nan, or a KeyError / TypeError traceback mid-scan
    "zero-scale": (lambda d: _first_probe(d)["scale"].__setitem__(0, 0.0), "scale[0]: Input should be greater than 0"),
    "short-coef": (lambda d: _first_probe(d)["coef"].pop(), "arrays of one probe differ in length"),
    "null-intercept": (lambda d: _first_probe(d).__setitem__("intercept", None), "intercept: Input should be a valid number"),
    "no-settings": (lambda d: d.pop("settings"), "settings: Field required"),
    "string-steps": (lambda d: d["settings"].__setitem__("steps", "20"), "settings.steps: Input should be a valid integer"),
    "infinite-median": (lambda d: json.dumps(d).replace('"median": [', '"median": [Infinity, ', 1),
                        "median[0]: Input should be a finite number"),
    "bad-step-tag": (lambda d: next(iter(d["categories"].values())).__setitem__("t099", _first_probe(d)),
                     "'t099' is not one of the file's steps"),
}


@pytest.mark.parametrize("name", list(EARLY_DAMAGE))
def test_a_damaged_early_probes_file_is_named_with_its_key(early_run, tmp_path, monkeypatch, capsys, name):
    damage, fragment = EARLY_DAMAGE[name]
    src = _damaged_early(early_run[0], tmp_path / "from", damage)
    (tmp_path / "p.jsonl").write_text((early_run[0] / "prompts.jsonl").read_text())
    before = _snapshot(tmp_path)
    code, err = _invoke(["predict", "--model", "mini", "--prompts", "p.jsonl", "--from", "from", "--early", "--of", "1",
                         "--out", "r.jsonl"], tmp_path, monkeypatch, capsys)
    _clean_exit(code, err, ["early_probes.json: damaged fitted probe", fragment, "probe"])
    assert "nan" not in err.lower()
    assert _snapshot(tmp_path) == before and not (tmp_path / "r.jsonl").exists()
    with pytest.raises(AuditError, match="early_probes.json"):  # select reads through the same loader
        from t2i_audit.select.scan import load_fitted

        load_fitted(src)


# --- failure_probe.json (`predict --from`) --------------------------------------------------------------------


def _failure_probe_run(root: Path) -> Path:
    from .test_output_folders import _probed_run

    return _probed_run(root)


FAILURE_DAMAGE = {
    # before: TypeError traceback formatting None after the whole ranking was computed
    "null-auroc": (lambda d: d.__setitem__("oof_auroc", None), "oof_auroc: Input should be a valid number"),
    # before: KeyError traceback
    "no-encoder": (lambda d: d.pop("encoder"), "encoder: Field required"),
    # before: ValueError from numpy broadcasting
    "short-scale": (lambda d: d["scale"].pop(), "arrays of one probe differ in length"),
    # before: every risk NaN, ranked and written
    "zero-scale": (lambda d: d["scale"].__setitem__(3, 0.0), "scale[3]: Input should be greater than 0"),
    "unknown-pooling": (lambda d: d.__setitem__("pooling", "max"), "pooling: unknown pooling 'max'"),
    "inf-coef": (lambda d: d["coef"].__setitem__(1, 1e999), "coef[1]: Input should be a finite number"),
    "auroc-above-1": (lambda d: d.__setitem__("oof_auroc", 1.5), "oof_auroc: Input should be less than or equal to 1"),
    "empty-object": (lambda d: d.clear(), "encoder: Field required"),
}


@pytest.mark.parametrize("name", list(FAILURE_DAMAGE))
def test_a_damaged_failure_probe_is_named_with_its_key(tmp_path, monkeypatch, capsys, name):
    from .test_output_folders import SUITE

    damage, fragment = FAILURE_DAMAGE[name]
    path = _failure_probe_run(tmp_path / "probed") / "probes" / "failure_probe.json"
    data = json.loads(path.read_text())
    damage(data)
    path.write_text(json.dumps(data))  # json.dumps writes 1e999 as Infinity
    (tmp_path / "suite.yaml").write_text(SUITE)
    before = _snapshot(tmp_path)
    code, err = _invoke(["predict", "--model", "tiny-sd", "--prompts", "suite.yaml", "--from", "probed", "--out", "f.out"],
                        tmp_path, monkeypatch, capsys)
    _clean_exit(code, err, ["failure_probe.json: damaged fitted probe", fragment, "t2i-audit probe"])
    assert "nan" not in err.lower() and _snapshot(tmp_path) == before


def test_a_sound_failure_probe_still_ranks(tmp_path, monkeypatch, capsys):
    from .test_output_folders import SUITE

    _failure_probe_run(tmp_path / "probed")
    (tmp_path / "suite.yaml").write_text(SUITE)
    code, err = _invoke(["predict", "--model", "tiny-sd", "--prompts", "suite.yaml", "--from", "probed", "--out", "f.out"],
                        tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    risks = [json.loads(line)["risk"] for line in (tmp_path / "f.out").read_text().splitlines()]
    assert len(risks) == 2 and all(0 < r < 1 for r in risks)
    # the file records no sample size: its AUROC is shown as it was stored
    assert "out-of-fold AUROC 0.500" in err


# --- label sheets (`calibrate --labels`) ------------------------------------------------------------------------


@pytest.fixture
def scored(tmp_path):
    """A run of 6 prompts × 4 images with vqa-blip prompt and question records (no model: records written here).
    Within a prompt every image has the same verdict, so its images are anything but independent."""
    from t2i_audit.rundir import append_jsonl
    from t2i_audit.scorers.base import Scorer, ScoreItem
    from t2i_audit.scorers.registry import get_card

    from ..scorers.scenes import draw, make_run, prompt

    # six pictures (one scene each: prompts of one scene would be one unit, scenes.prompt_groups)
    looks = [("red", "square"), ("blue", "square"), ("green", "square"), ("yellow", "square"), ("red", "circle"),
             ("blue", "circle")]
    ps = [prompt(c, o, pid=f"p{i:012d}", category="color") for i, (c, o) in enumerate(looks)]
    scenes = [(p, draw([("square", "red", (2, 2, 20, 20))])) for p in ps for _ in range(4)]
    rd = make_run(tmp_path / "run", scenes)
    s = Scorer(get_card("vqa-blip"))
    recs = []
    for img in rd.read_images():
        p = next(q for q in ps if q["id"] == img["prompt_id"])
        v = int(p["id"][-1]) % 2 == 0
        it = ScoreItem(p, img)
        recs += [s.record(it, "question", question_id="q1", value=0.9 if v else 0.1, verdict=v),
                 s.prompt_record(it, v, [], value=0.9 if v else 0.1)]
    append_jsonl(rd.scores("vqa-blip"), recs)
    return rd


def _sheet(path: Path, rows, header=("prompt_id", "sample", "question_id", "label")) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def _calibrate(tmp_path, monkeypatch, capsys, run, labels, *extra):
    return _invoke(["calibrate", str(run.root), "--labels", str(labels), "--bootstrap", "50", *extra], tmp_path,
                   monkeypatch, capsys)


LABEL_CASES = {
    # before: pandas EmptyDataError traceback
    "empty-file": (lambda p: p.write_text("") or p, ["labels.csv: needs columns 'label'", "none (an empty file?)"]),
    # before: IsADirectoryError traceback
    "a-folder": (lambda p: p.mkdir() or p, ["labels.csv: is a folder"]),
    # before: accepted, exit 0 (a label of infinity counted as "yes")
    "inf": (lambda p: _sheet(p, [("p000000000000", 0, "", "inf")]), ["labels.csv:2: label 'inf' is not a finite number"]),
    "nan": (lambda p: _sheet(p, [("p000000000000", 0, "", "NaN")]), ["labels.csv:2: label 'NaN' is not a finite number"]),
    # before: exit 0 with "0 labels matched"
    "another-run": (lambda p: _sheet(p, [("p000000000000", 0, "", 1), ("pdeadbeef0000", 0, "", 1)]),
                    ["labels.csv:3: prompt_id 'pdeadbeef0000' sample 0 is not an image of", "(a sheet of another run?)"]),
    "sample-out-of-range": (lambda p: _sheet(p, [("p000000000000", 7, "", 1)]), ["labels.csv:2: prompt_id",
                                                                                  "sample 7 is not an image"]),
    "unknown-question": (lambda p: _sheet(p, [("p000000000000", 0, "q9", 1)]),
                         ["labels.csv:2: question_id 'q9' is not a question of prompt p000000000000"]),
    # the drill: one image labelled 1 fifty times and 0 fifty times — before: 100 "independent" labels, exit 0
    "conflict": (lambda p: _sheet(p, [("p000000000000", 0, "", lab) for lab in [1, 0] * 50]),
                 ["labels.csv:2: prompt_id p000000000000 sample 0", "is labelled yes 50 and no 50 times",
                  "(also lines 3, 4, 5, 6, 7, 8, 9, 10, …)", "one (image, question) is one label"]),
}


@pytest.mark.parametrize("name", list(LABEL_CASES))
def test_a_bad_label_sheet_is_refused_with_its_place(scored, tmp_path, monkeypatch, capsys, name):
    make, fragments = LABEL_CASES[name]
    labels = make(tmp_path / "labels.csv")
    before = _snapshot(tmp_path)
    code, err = _calibrate(tmp_path, monkeypatch, capsys, scored, labels)
    _clean_exit(code, err, fragments)
    assert _snapshot(tmp_path) == before and not (scored.root / "calibration").exists()


def test_labels_matching_no_record_exit_2(scored, tmp_path, monkeypatch, capsys):
    # a real image, but no scorer has a record of it (here: vqa-blip's records removed for that prompt)
    from t2i_audit.rundir import read_jsonl

    recs = [r for r in read_jsonl(scored.scores("vqa-blip")) if r["prompt_id"] != "p000000000000"]
    scored.scores("vqa-blip").write_text("".join(json.dumps(r) + "\n" for r in recs))
    labels = _sheet(tmp_path / "l.csv", [("p000000000000", k, "", 1) for k in range(4)])
    code, err = _calibrate(tmp_path, monkeypatch, capsys, scored, labels)  # before: exit 0, "0 labels matched"
    _clean_exit(code, err, ["l.csv: none of its 4 labels matches a record of vqa-blip"])


def test_repeated_labels_are_one_label_and_cis_resample_prompt_groups(scored, tmp_path, monkeypatch, capsys):
    """Raters: every image labelled three times (2 of 3 agree) is ONE label, by majority; the CIs resample
    whole prompt groups (scenes.prompt_groups: a scene's prompts with swap twins), the unit of independence."""
    rows = []
    truth = {}
    for img in scored.read_images():
        pid, k = img["prompt_id"], img["sample"]
        lab = int(int(pid[-1]) % 3 != 0)  # disagrees with the verdict on some prompts
        truth[(pid, k)] = lab
        rows += [(pid, k, "", lab), (pid, k, "", lab), (pid, k, "", 1 - lab)]
    labels = _sheet(tmp_path / "l.csv", rows)
    code, err = _calibrate(tmp_path, monkeypatch, capsys, scored, labels)
    assert code in (0, None), err
    rep = json.loads((scored.root / "calibration" / "report.json").read_text())
    assert rep["n_labels"] == 24 and rep["n_label_rows"] == 72 and rep["merged"] == 24
    m = rep["scorers"]["vqa-blip"]["levels"]["prompt"]["all"]
    assert m["n"] == 24 and m["n_prompts"] == 6
    verdict = np.array([int(pid[-1]) % 2 == 0 for pid, _ in sorted(truth)], dtype=int)
    label = np.array([truth[k] for k in sorted(truth)])
    group_of = groups_by_id(scored.read_prompts())
    groups = np.array([group_of[pid] for pid, _ in sorted(truth)], dtype=object)
    assert m["accuracy"] == pytest.approx((verdict == label).mean())
    acc = lambda v, lab: float((v == lab).mean())  # noqa: E731
    assert m["accuracy_ci"] == list(stats.cluster_bootstrap_ci(acc, verdict, label, groups=groups, n_boot=50, seed=0))
    # 24 labelled images: a κ (≥ 20 over ≥ 5 prompts) is shown
    assert m["kappa"] is not None and "too_few" not in m


def test_too_few_labels_print_too_few(scored, tmp_path, monkeypatch, capsys):
    labels = _sheet(tmp_path / "l.csv", [(f"p{i:012d}", 0, "", i % 2) for i in range(6)])
    monkeypatch.chdir(tmp_path)
    import sys

    from t2i_audit import cli

    monkeypatch.setattr(sys, "argv", ["t2i-audit", "calibrate", str(scored.root), "--labels", str(labels)])
    with pytest.raises(SystemExit) as e:
        cli.main()
    out = capsys.readouterr().out
    assert e.value.code in (0, None)
    assert "acc=too few" in out and "kappa=too few" in out, out  # 6 images: no rate (< 10), no κ (< 20)
    assert "(too few: 6 labelled images, 6 prompts; a κ needs ≥ 20 labelled images over ≥ 5 prompts)" in out


def test_export_sheet_never_replaces_a_file_without_force(scored, tmp_path, monkeypatch, capsys):
    # before: the user's notes replaced, exit 0; a folder path gave a traceback
    notes = tmp_path / "mynotes.csv"
    notes.write_text("my notes")
    code, err = _invoke(["calibrate", str(scored.root), "--export-sheet", str(notes)], tmp_path, monkeypatch, capsys)
    _clean_exit(code, err, ["mynotes.csv: file exists", "--force"])
    assert notes.read_text() == "my notes"
    code, err = _invoke(["calibrate", str(scored.root), "--export-sheet", str(notes), "--force"], tmp_path,
                        monkeypatch, capsys)
    assert code in (0, None), err
    assert notes.read_text().startswith("prompt_id,sample,image")
    code, err = _invoke(["calibrate", str(scored.root), "--export-sheet", str(tmp_path)], tmp_path, monkeypatch, capsys)
    _clean_exit(code, err, [f"{tmp_path}: is a folder"])


# --- `label RUN` with a damaged image --------------------------------------------------------------------------


def test_label_skips_and_names_a_truncated_png(scored, tmp_path, monkeypatch, capsys):
    images = scored.read_images()
    half, stub = scored.root / images[0]["path"], scored.root / images[5]["path"]
    half.write_bytes(half.read_bytes()[: len(half.read_bytes()) // 2])  # before: embedded as a broken picture
    stub.write_bytes(stub.read_bytes()[:20])  # before: OSError traceback (Truncated File Read)
    code, err = _invoke(["label", str(scored.root), "--n", "24", "--out", "page.html"], tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    assert f"skipped damaged image {images[0]['path']}" in err and f"skipped damaged image {images[5]['path']}" in err
    assert "22 images" in err and "2 damaged, skipped" in err
    page = (tmp_path / "page.html").read_text()
    assert page.count("data:image/png;base64,") == 22


# --- `prompts import --questions-by NAME=` ---------------------------------------------------------------------


def test_questions_by_with_an_empty_path_is_refused(tmp_path, monkeypatch, capsys):
    # before: tiny-llm= used the card's own model, silently (qwen3-8b=: the hub model)
    (tmp_path / "color_val.txt").write_text("a red apple and a blue cup\n")
    code, err = _invoke(["prompts", "import", "color_val.txt", "--format", "t2i-compbench", "--out", "o.jsonl",
                         "--questions-by", "tiny-llm="], tmp_path, monkeypatch, capsys)
    _clean_exit(code, err, ["--questions-by 'tiny-llm='", "empty path after '='"])
    assert not (tmp_path / "o.jsonl").exists()


# --- the one small-sample rule -----------------------------------------------------------------------------------


def test_the_small_sample_rule_at_its_edges():
    assert stats.too_few("auroc", n=40, n_minority=stats.MIN_PER_CLASS, n_units=stats.MIN_UNITS) is None
    assert stats.too_few("auroc", n=40, n_minority=stats.MIN_PER_CLASS - 1, n_units=40)
    assert stats.too_few("auroc", n=40, n_minority=20, n_units=stats.MIN_UNITS - 1)
    assert stats.too_few("rate", n=stats.MIN_RATE_N) is None and stats.too_few("rate", n=stats.MIN_RATE_N - 1)
    assert stats.too_few("kappa", n=stats.MIN_KAPPA_N, n_units=5) is None
    assert stats.too_few("kappa", n=stats.MIN_KAPPA_N - 1, n_units=5)
    assert stats.shown(0.71234, None) == "0.712" and stats.shown(0.7, "too few: …") == "too few"
    assert stats.shown(float("nan")) == "—"
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 12)
    s = y + rng.normal(0, 1, 24)
    groups = np.arange(24) // 2
    assert stats.auroc_or_too_few(y, s, groups=groups, n_boot=50) == stats.auroc_ci(y, s, groups=groups, n_boot=50)
    few = stats.auroc_or_too_few(y[:16], s[:16], groups=groups[:16], n_boot=50)
    assert few["auroc"] is None and few["n"] == 16 and few["too_few"].startswith("too few: 16 images, 4 in the smaller")


def test_the_report_says_too_few_instead_of_a_number(early_run, tmp_path):
    """The same rule on the page: 8 images make no success rate nor an AUROC (before: "62.5%", AUROCs)."""
    from t2i_audit.report import render_report

    page = render_report(early_run[0], out_dir=tmp_path / "rep", progress=False).read_text()
    hero = page[page.index('class="stat big"'):page.index('<span class="label">prompts</span>')]
    assert "too few" in hero and "%" not in hero, hero
    early = page[page.index('id="early"'):]
    early = early[:early.index("</section>")]
    assert 'title="too few: 8 images, ' in early and "not evaluated" in early
    assert ">nan<" not in page.lower() and "nan%" not in page.lower()  # ("nan" is also an image flag's name)


def test_probe_prints_a_failure_auroc_from_few_prompts_as_too_few(early_run, tmp_path, monkeypatch, capsys):
    """The printer of `probe` (the stage's own numbers are pinned in tests/probes): 16 prompts, 4 failed, 4
    compositions — before: "AUROC 0.900 vs prompt-only baseline 0.500 — the activations add …"."""
    import t2i_audit.probes as probes

    summary = {"failure_prediction": {"encoder": "text_encoder", "layer": "h01", "pooling": "eos", "auroc": 0.9,
                                      "baseline_auroc": 0.5, "verdict": "the activations add over the prompt-only "
                                      "baseline", "n": 16, "failure_rate": 0.25, "n_compositions": 4}}
    monkeypatch.setattr(probes, "run_probe_stage", lambda *a, **k: summary)
    monkeypatch.chdir(tmp_path)
    import sys

    from t2i_audit import cli

    monkeypatch.setattr(sys, "argv", ["t2i-audit", "probe", str(early_run[0]), "--model", "mini"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    out = capsys.readouterr().out
    assert e.value.code in (0, None), out
    assert "AUROC too few: 16 prompts, 4 in the smaller class, 4 compositions" in out and "0.900" not in out
