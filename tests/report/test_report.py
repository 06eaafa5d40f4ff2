import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from synth import make_prompts, make_run
from t2i_audit.errors import AuditError
from t2i_audit.report import render_report
from t2i_audit.rundir import RunDir, read_jsonl


def test_report_files_and_headline_numbers(run_dir, rendered):
    out = Path(run_dir) / "report"
    assert rendered == out / "index.html"
    html = rendered.read_text()
    rd = RunDir(run_dir)
    summary = json.loads(rd.summary.read_text())
    assert summary["generate"] == {"images": 90}  # other helpers' keys untouched
    rep = summary["report"]
    assert rep["images"] == 90 and rep["flagged"] == 1 and rep["scored"] == 89
    # recompute the headline from the score file by hand
    lines = [r for r in read_jsonl(rd.scores(rep["scorer"])) if r["kind"] == "prompt" and r["verdict"] is not None]
    assert rep["overall"]["n"] == len(lines)
    assert rep["overall"]["k"] == sum(r["verdict"] for r in lines)
    assert set(rep["by_category"]) == {"color_binding", "spatial", "counting"}
    assert f"{rep['overall']['rate']:.1%}" in html
    for sec in ("headline", "heatmaps", "failures", "gallery", "scorers", "probes", "manifest"):
        assert f'id="{sec}"' in html
    stage = rd.read_manifest()["stages"]["report"]
    assert stage["status"] == "done" and stage["images"] == 90


def test_self_contained_no_external_references(rendered):
    html = rendered.read_text()
    assert "<link" not in html
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "http://" not in html and "https://" not in html
    for src in re.findall(r'<img src="([^"]+)"', html):
        assert (rendered.parent / src).is_file(), src


def test_results_table_one_row_per_image_question(run_dir, rendered):
    out = Path(run_dir) / "report"
    pq = pd.read_parquet(out / "results.parquet")
    csv = pd.read_csv(out / "results.csv")
    prompts = {p["id"]: p for p in read_jsonl(Path(run_dir) / "prompts.jsonl")}
    images = read_jsonl(Path(run_dir) / "images.jsonl")
    expected = sum(len(prompts[i["prompt_id"]]["questions"]) for i in images)
    assert len(pq) == len(csv) == expected
    for col in ("prompt_id", "sample", "question_id", "kind", "clip-foil.verdict", "vqa-blip.verdict", "verdict"):
        assert col in pq.columns
    # a known score line appears in the table
    line = next(r for r in read_jsonl(Path(run_dir) / "scores" / "vqa-blip.jsonl")
                if r["kind"] == "question" and r["verdict"] is not None)
    row = pq[(pq.prompt_id == line["prompt_id"]) & (pq["sample"] == line["sample"]) & (pq.question_id == line["question_id"])]
    assert bool(row["vqa-blip.verdict"].iloc[0]) == line["verdict"]
    assert row["vqa-blip.value"].iloc[0] == pytest.approx(line["value"])
    assert pq.loc[pq["flags"] == "black", "verdict"].isna().all() and (pq["flags"] == "black").any()


def test_rerender_reuses_thumbnails_by_sha(run_dir, rendered):
    thumbs = sorted((Path(run_dir) / "report" / "thumbs").glob("*/*.jpg"))
    assert thumbs
    shas = {json.loads(l)["sha256"] for l in (Path(run_dir) / "images.jsonl").read_text().splitlines()}
    assert {t.stem for t in thumbs} <= shas
    mtimes = {t: t.stat().st_mtime_ns for t in thumbs}
    render_report(run_dir, progress=False)
    rep = json.loads((Path(run_dir) / "summary.json").read_text())["report"]
    assert rep["thumbnails"]["made"] == 0 and rep["thumbnails"]["reused"] == len(thumbs)
    assert all(t.stat().st_mtime_ns == m for t, m in mtimes.items())


def test_gallery_worst_first_with_twin_and_verdicts(rendered):
    html = rendered.read_text()
    cards = re.findall(r'<article class="card".*?</article>', html, re.S)
    assert cards
    comps = [tuple(map(int, re.search(r"composition (\d+)/(\d+)", c).groups())) for c in cards]
    rates = [k / n for k, n in comps]
    assert rates == sorted(rates)  # worst compositions first
    twin_cards = [c for c in cards if "swap twin" in c]
    assert twin_cards and all("twin: a photo of" in c for c in twin_cards)
    assert all('class="v vx"' in c for c in cards)  # every failure shows a failed question


def test_hostile_concept_is_escaped(tmp_path):
    evil = "<script>alert(1)</script>"
    run = make_run(tmp_path / "evil", prompts=make_prompts(concept_override=evil), model="<b>m</b>")
    page = render_report(run, progress=False).read_text()
    body = page.split("<body>", 1)[1]
    assert evil not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<b>m</b>" not in body and "&lt;b&gt;m&lt;/b&gt;" in body
    # only our one inline script in the whole page
    assert page.count("<script>") == 1


def test_missing_scores_and_probes_render_not_run(tmp_path):
    run = make_run(tmp_path / "bare", scorers=(), probes=False)
    html = render_report(run, progress=False).read_text()
    assert "Scoring: not run." in html and "Probes: not run." in html
    rep = json.loads((run / "summary.json").read_text())["report"]
    assert rep["scorer"] is None and rep["overall"] is None and rep["scored"] == 0


def test_probe_stage_that_fitted_nothing_is_not_reported_as_not_run(tmp_path):
    """A small run's probe stage writes every probes/*.jsonl, empty (too few prompts to fit): the
    page said "Probes: not run"; it says the stage ran and why each part is empty."""
    run = make_run(tmp_path / "small", probes=False)
    rd = RunDir(run)
    for name in ("decodability", "failure", "correlation"):
        (rd.probes_dir / f"{name}.jsonl").parent.mkdir(exist_ok=True)
        (rd.probes_dir / f"{name}.jsonl").write_text("")
    summary = json.loads(rd.summary.read_text())
    summary["probes"] = {"failure_prediction": {"skipped": "no scored prompts with both outcomes"},
                         "correlation": {"skipped": "needs scored prompts and decodable constituents"}}
    rd.summary.write_text(json.dumps(summary))
    html = render_report(run, progress=False).read_text()
    assert "Probes: not run." not in html
    assert "Decodability: nothing fitted.</b> The probe stage ran; a decodability probe needs" in html
    assert "Failure prediction: nothing fitted.</b> The probe stage ran and skipped it: no scored prompts " \
           "with both outcomes." in html
    assert "Correlation: nothing fitted.</b> The probe stage ran and skipped it: needs scored prompts" in html
    (rd.probes_dir / "correlation.jsonl").unlink()  # a file the stage did not write: missing, as before
    html = render_report(run, progress=False).read_text()
    assert "Correlation: not run.</b> probes/correlation.jsonl missing." in html


def test_scorer_disagreement_listed(run_dir, rendered):
    html = rendered.read_text()
    rep = json.loads((Path(run_dir) / "summary.json").read_text())["report"]
    (pair,) = rep["scorer_agreement"]
    a = {(r["prompt_id"], r["sample"]): r["verdict"] for r in read_jsonl(Path(run_dir) / "scores/clip-foil.jsonl") if r["kind"] == "prompt"}
    b = {(r["prompt_id"], r["sample"]): r["verdict"] for r in read_jsonl(Path(run_dir) / "scores/vqa-blip.jsonl") if r["kind"] == "prompt"}
    both = [k for k in a if a[k] is not None and b.get(k) is not None]
    agree = sum(a[k] == b[k] for k in both)
    assert pair["image_rate"] == pytest.approx(agree / len(both))
    assert f"({len(both) - agree} images" in html


def test_explicit_scorer_and_unknown_scorer(run_dir, tmp_path):
    render_report(run_dir, out_dir=tmp_path / "r", progress=False, scorer="vqa-blip")
    assert json.loads((Path(run_dir) / "summary.json").read_text())["report"]["scorer"] == "vqa-blip"
    with pytest.raises(AuditError, match=r"no scores from scorer 'vqa-blp'.*Did you mean 'vqa-blip'"):
        render_report(run_dir, out_dir=tmp_path / "r2", progress=False, scorer="vqa-blp")
    with pytest.raises(AuditError, match="not a run directory"):
        render_report(tmp_path, progress=False)


def test_probes_section_reads_probe_files(rendered):
    html = rendered.read_text()
    assert "Decodability per layer" in html and "slot (own span) pooling" in html
    assert "AUROC 0.760 [0.70, 0.82] vs baseline 0.560" in html
    assert "Spearman ρ 0.36 [0.06, 0.66]" in html  # the row with points gets a scatter


def _copy(run, tmp_path) -> Path:
    """Another folder holding the same run (compare refuses one folder given twice)."""
    import shutil

    return Path(shutil.copytree(run, tmp_path / "copy"))


def test_report_never_imports_torch(run_dir, tmp_path):
    code = ("import sys; from t2i_audit.report import render_report, compare_runs; "
            "from t2i_audit.report import cli; "
            f"render_report({str(run_dir)!r}, out_dir={str(tmp_path / 'o')!r}, progress=False); "
            f"compare_runs([{str(run_dir)!r}, {str(_copy(run_dir, tmp_path))!r}], {str(tmp_path / 'c')!r}); "
            "bad = [m for m in ('torch', 'transformers', 'diffusers', 'open_clip') if m in sys.modules]; "
            "assert not bad, bad; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")


def test_cli_report_and_compare(run_dir, tmp_path):
    import typer
    from typer.testing import CliRunner

    from t2i_audit.report.cli import register

    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["report", str(run_dir), "--out", str(tmp_path / "rep"), "-q"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rep" / "index.html").is_file()
    res = CliRunner().invoke(app, ["compare", str(run_dir), str(_copy(run_dir, tmp_path)), "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cmp" / "compare.json").is_file()


def test_accepts_a_rundir_object_as_the_api_passes_it(run_dir, tmp_path):
    page = render_report(RunDir(run_dir), out_dir=tmp_path / "viaobj", progress=False)
    assert page == tmp_path / "viaobj" / "index.html" and page.stat().st_mode & 0o044 == 0o044


def test_gallery_cap_keeps_every_failed_category(monkeypatch, run_dir, tmp_path):
    from t2i_audit.report import html as html_mod

    monkeypatch.setattr(html_mod, "GALLERY_MAX", 6)
    page = render_report(run_dir, out_dir=tmp_path / "cap", progress=False).read_text()
    cards = re.findall(r'<article class="card" data-category="([^"]+)"', page)
    assert len(cards) == 6 and set(cards) == {"color_binding", "spatial", "counting"}
    assert "6 of " in page


def _declined_run(root: Path) -> Path:
    """A run whose only scorer (named as the mini world's pixel judge) declined every question: the state of
    `run --model mini --prompts <geneval import>` (COCO objects are no mini-world shape)."""
    run = make_run(root, prompts=make_prompts(n_binding=3, n_rel=2, n_count=1), scorers=("mini-pixel",),
                   probes=False, black=0)
    path = RunDir(run).scores("mini-pixel")
    recs = list(read_jsonl(path))
    for r in recs:
        r["verdict"], r["failures"] = None, []
        if r["kind"] == "question":
            r["value"] = None
            r["extra"] = {**(r.get("extra") or {}), "unsupported": True, "kind": r["extra"].get("kind", "exists")}
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run


def test_report_says_scoring_ran_and_what_was_declined(tmp_path):
    run = _declined_run(tmp_path / "run")
    n = sum(1 for r in read_jsonl(RunDir(run).scores("mini-pixel")) if r["kind"] == "question")
    html = render_report(run, progress=False).read_text()
    text = re.sub(r"<[^>]+>", "", html)
    assert "Scoring: not run" not in text and "run `t2i-audit score RUN`" not in text
    assert "Scoring ran, but gave no verdict." in text
    assert f"mini-pixel declined {n} of {n} questions (" in text
    assert "Declined questions" in text


def test_run_command_warns_when_most_questions_are_unsupported(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from t2i_audit import api
    from t2i_audit.cli import app

    run = _declined_run(tmp_path / "run")
    n = sum(1 for r in read_jsonl(RunDir(run).scores("mini-pixel")) if r["kind"] == "question")
    (tmp_path / "p.jsonl").write_text((Path(run) / "prompts.jsonl").read_text())
    monkeypatch.setattr(api, "run_audit", lambda cfg, progress=True: Path(run))  # the stages themselves: elsewhere
    res = CliRunner().invoke(app, ["run", "--model", "mini", "--prompts", str(tmp_path / "p.jsonl"), "--out",
                                   str(tmp_path / "x")])
    assert res.exit_code == 0, res.output
    assert f"most questions went unanswered (unsupported, not failed): mini-pixel declined {n} of {n}" in res.output
    assert "qwen3-vl-8b" in res.output and "geneval2" in res.output  # scorers that answer them


def test_score_command_warns_when_most_questions_are_unsupported(tmp_path):
    """`t2i-audit score` says so too (resumed here: the records are already on disk)."""
    from typer.testing import CliRunner

    from t2i_audit.cli import app

    run = _declined_run(tmp_path / "run")
    res = CliRunner().invoke(app, ["score", str(run), "-s", "mini-pixel"])
    assert res.exit_code == 0, res.output
    assert "most questions went unanswered (unsupported, not failed): mini-pixel declined" in res.output
