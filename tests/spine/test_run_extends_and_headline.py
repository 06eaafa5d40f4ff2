"""`run -n` extends the run the same command made (the default folder is named without -n), and `run` ends by
printing the headline beside the paths — the figures the report shows, so a newcomer sees the result without
opening a page (issue 37 points 6 and 7)."""

from __future__ import annotations

import json
import sys

import pytest

from t2i_audit import api, cli
from t2i_audit.rundir import read_jsonl

RUN = ["run", "--model", "mini", "--prompts", "mini", "--limit", "4", "--steps", "2", "--scorer", "mini-pixel",
       "--stages", "prompts,generate,score,report", "-q"]


def _run(argv, monkeypatch, capsys) -> str:
    monkeypatch.setattr(sys, "argv", ["t2i-audit", *argv])
    with pytest.raises(SystemExit) as exited:  # click's standalone mode ends with sys.exit
        cli.main()
    out = capsys.readouterr()
    assert exited.value.code in (0, None), f"exit {exited.value.code}: {out}"
    return out.out


def test_the_same_command_with_a_larger_n_extends_its_run_and_prints_the_headline(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    first = _run(RUN, monkeypatch, capsys)
    (root,) = (tmp_path / "runs").iterdir()
    made = {(r["prompt_id"], r["sample"]): r["sha256"] for r in read_jsonl(root / "images.jsonl")}
    assert len(made) == 4
    head = [line for line in first.splitlines() if line.startswith("headline: ")]
    report = json.loads((root / "summary.json").read_text())["report"]
    split = {s: f"{r['k']}/{r['n']}" for s, r in report["by_split"].items()}
    assert head == [f"headline: {report['overall']['k']} of 4 images pass every question (too few for a rate); "
                    f"seen {split['train']} (too few for a rate), held out {split['heldout']} (too few for a rate)"]
    assert first.index("report: ") < first.index("headline: ")

    second = _run([*RUN, "-n", "2"], monkeypatch, capsys)
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [root.name], "-n 2 made a new folder"
    now = {(r["prompt_id"], r["sample"]): r["sha256"] for r in read_jsonl(root / "images.jsonl")}
    assert len(now) == 8 and {k: now[k] for k in made} == made  # extended; the images made stay as they were
    gen = json.loads((root / "manifest.json").read_text())["stages"]["generate"]
    assert gen["reused"] == 4 and gen["generated_now"] == 4
    assert "headline: " in second and " of 8 images pass every question" in second


def test_a_run_named_before_the_folder_left_out_n_is_extended_there(tmp_path, monkeypatch):
    """A run made with -n 1 by an older version is named by the fingerprint with -n in it: the same command with
    -n 2 finds it (rather than starting over in a new folder)."""
    monkeypatch.chdir(tmp_path)
    one = api.make_config({"model": "mini", "prompts": ["mini"], "limit": 4})
    two = one.model_copy(update={"images_per_prompt": 2})
    new = api.default_run_dir(two)
    assert new == api.default_run_dir(one)  # one folder for every -n
    old = new.with_name(f"mini_mini_{one.fingerprint()}")
    assert old != new
    old.mkdir(parents=True)
    assert api.default_run_dir(two) == old
