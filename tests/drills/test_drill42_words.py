"""The words of issue 42's drill: what a command says must be true of what it did, read as a user reads it."""

from __future__ import annotations

import json
from pathlib import Path

from t2i_audit.verify import format_result, verify_run

from ..spine.test_command_properties import invoke
from .test_drill42_records import finished_run, own_run  # noqa: F401 — the shared finished mini run


def test_score_on_a_finished_run_says_nothing_new_and_the_totals(own_run, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Before: "mini-pixel: 0 scored, 8 resumed …; passed 0, failed 0" — read as every image failing to score."""
    recs = [json.loads(x) for x in (own_run / "scores/mini-pixel.jsonl").read_text().splitlines()]
    prompt = [r for r in recs if r["kind"] == "prompt"]
    passed, failed = sum(r["verdict"] is True for r in prompt), sum(r["verdict"] is False for r in prompt)
    code, out = invoke(["score", str(own_run), "-s", "mini-pixel", "--device", "cpu", "-q"], tmp_path, monkeypatch,
                       capsys)
    assert code == 0, out
    line = next(x for x in out.splitlines() if x.startswith("mini-pixel: "))
    assert line.startswith("mini-pixel: nothing new to score; 8 images already scored (all 8 images: "
                           f"passed {passed}, failed {failed}"), line
    assert "passed 0, failed 0" not in line or passed == failed == 0


def test_verify_says_what_it_checked_and_reports_a_stray_file_of_any_format(own_run):  # noqa: F811
    """Before: "stray 282 files ok" (read as 282 stray files), and a stray .jpg in images/ was not reported. A file
    in images/ that no record lists is stray whatever its format (a run's own images may be JPEG or WebP now)."""
    said = format_result(verify_run(own_run))
    stray = next(x for x in said.splitlines() if x.split()[:1] == ["stray"])
    assert stray.split()[1:] == ["9", "files", "checked:", "none", "stray"], stray  # 8 images + 1 score file
    folder = next(p for p in (own_run / "images").iterdir() if p.is_dir())
    (folder / "holiday.jpg").write_bytes(b"\xff\xd8\xff\xe0 not ours")
    (own_run / "images" / "notes.txt").write_text("mine")
    result = verify_run(own_run)
    strays = sorted(p["path"] for p in result["problems"] if p["category"] == "stray")
    assert strays == sorted([f"images/{folder.name}/holiday.jpg", "images/notes.txt"]), strays
    line = next(x for x in format_result(result).splitlines() if x.split()[:1] == ["stray"])
    assert line.split()[-2:] == ["2", "stray"], line


def test_compare_of_runs_without_images_says_so_and_how_to_make_them(tmp_path, monkeypatch, capsys, repo_root):
    """Before: "no scorer has scored every run (…); run the same scorer on each" — for runs with no images at all."""
    runs = []
    for name in ("a", "b"):
        code, out = invoke(["run", "--model", "mini", "--prompts", "mini", "--limit", "2", "--stages", "prompts",
                            "--out", name, "-q"], tmp_path, monkeypatch, capsys)
        assert code == 0, out
        runs.append(tmp_path / name)
    code, out = invoke(["compare", "a", "b", "--out", "cmp"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "Traceback" not in out, out
    assert "a: no images to compare (images.jsonl is missing; so are 1 other run(s))" in out, out
    assert f"--config {Path('a') / 'run.yaml'} --out a --stages prompts,generate,score" in out, out
    assert "run the same scorer on each" not in out


def test_the_exported_sheet_holds_the_labelling_pages_images_only(own_run, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Before: the README's `calibrate --export-sheet` beside `label --n 40` exported every image's questions (1,512
    on the quickstart). With ``--n`` (and ``--seed``) the sheet holds the page's images, each with its questions."""
    import csv
    import re

    code, out = invoke(["label", str(own_run), "--n", "3", "--seed", "5", "--out", str(tmp_path / "page.html"), "-q"],
                       tmp_path, monkeypatch, capsys)
    assert code == 0, out
    page = set(re.findall(r'"key":\s*"([^"]+)"', (tmp_path / "page.html").read_text()))
    assert len(page) == 3, page
    code, out = invoke(["calibrate", str(own_run), "--export-sheet", str(tmp_path / "sheet.csv"), "--n", "3",
                        "--seed", "5"], tmp_path, monkeypatch, capsys)
    assert code == 0, out
    rows = list(csv.DictReader(open(tmp_path / "sheet.csv")))
    assert {f"{r['prompt_id']}/{r['sample']}" for r in rows} == page
    prompts = {json.loads(x)["id"]: json.loads(x) for x in (own_run / "prompts.jsonl").read_text().splitlines()}
    assert len(rows) == sum(1 + len(prompts[k.split("/")[0]]["questions"]) for k in page)
    assert f"wrote {len(rows)} rows" in out


REPO = Path(__file__).resolve().parents[2]


def test_a_benchmark_rerun_never_overwrites_committed_figures(tmp_path, monkeypatch):
    """Before: every benchmark script wrote benchmarks/results/<name>.json, the committed figures the docs quote."""
    import subprocess
    import sys

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import _common

    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    monkeypatch.delenv("BENCH_OUT", raising=False)
    (tmp_path / "score.json").write_text('{"committed": true}\n')
    first = _common.write("score", {"x": 1})
    second = _common.write("score", {"x": 2})
    assert (tmp_path / "score.json").read_text() == '{"committed": true}\n'
    assert len({first, second, tmp_path / "score.json"}) == 3 and first.name.startswith("score-")
    monkeypatch.setenv("BENCH_OUT", str(tmp_path / "named.json"))
    assert _common.write("score", {"x": 3}) == tmp_path / "named.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks/selection_summary.py"), str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--out" in done.stderr  # no default over results/selection_mini.json


def test_docs_that_need_a_checkout_say_so_first_and_speak_of_no_issue_numbers():
    import re

    for name in ("benchmarks.md", "selection.md"):
        head = "\n".join((REPO / "docs" / name).read_text().splitlines()[:8])
        assert "Needs a checkout of the repository" in head, name
    for path in sorted((REPO / "docs").glob("*.md")):
        found = re.findall(r"\b[Ii]ssues? \d+", path.read_text())
        assert not found, (path.name, found)
