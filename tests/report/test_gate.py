"""The regression gate (`compare BASE CANDIDATE --fail-on-drop D`, report/gate.py): the page's Holm-corrected test
decides the exit code, thin evidence and partial coverage are "inconclusive" (exit 3), other model settings are
refused (exit 2) unless --allow-different-settings, and the numbers per category are printed.

Runs are synthetic (synth.make_run) with the image verdicts set by hand, so that each case holds by construction:
BASE passes every image; each CANDIDATE fails chosen prompt groups."""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from synth import make_prompts, make_run
from t2i_audit.rundir import RunDir, atomic_write_jsonl, read_jsonl

SETTINGS = {"steps": 20, "guidance": 7.0, "size": 48, "dtype": "float32", "device": "cpu", "batch_size": 4}


def _distinct_spatial_scenes(prompts: list[dict], n: int) -> list[dict]:
    """``prompts`` with the first ``n`` spatial prompts that are each a scene of their own (scenes.prompt_groups: a
    relation, its converse and its swapped ends are one scene), so every spatial prompt is its own prompt group."""
    from t2i_audit.scenes import prompt_groups

    keep, seen = [], set()
    for p, g in zip(prompts, prompt_groups(prompts)):
        if p["category"] == "spatial":
            if g in seen or len(seen) == n:
                continue
            seen.add(g)
        keep.append(p)
    assert len(seen) == n, f"only {len(seen)} distinct spatial scenes"
    return keep


# 12 colour twin groups, 16 spatial prompts each its own scene, 12 counting prompts: every category ≥ 10 groups
PROMPTS = _distinct_spatial_scenes(make_prompts(n_binding=24, n_rel=40, n_count=12), 16)


def _run(root: Path, fails=lambda p, s: False, prompts=PROMPTS, **settings) -> Path:
    """A run whose image (prompt, sample) fails exactly when ``fails(prompt, sample)``."""
    run = make_run(root, prompts=prompts, model=root.name, probes=False, black=0, scorers=("clip-foil",),
                   config={**SETTINGS, **settings})
    path = RunDir(run).scores("clip-foil")
    byid = {p["id"]: p for p in prompts}
    recs = []
    for r in read_jsonl(path):
        if r["kind"] == "prompt":
            bad = fails(byid[r["prompt_id"]], r["sample"])
            r = {**r, "verdict": not bad, "failures": [{"type": "wrong_relation", "slot": "rel", "object": "o1",
                                                         "detail": ""}] if bad else []}
        recs.append(r)
    atomic_write_jsonl(path, recs)
    return run


def _spatial(k: int):
    """Fails every image of the first ``k`` spatial prompts."""
    ids = [p["id"] for p in PROMPTS if p["category"] == "spatial"][:k]
    return lambda p, s: p["id"] in ids


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("gate")
    return {"base": _run(base / "base"),
            "same": _run(base / "same"),
            "drop": _run(base / "drop", fails=_spatial(16)),
            "holm": _run(base / "holm", fails=_spatial(4)),
            "steps": _run(base / "steps", steps=2),
            "root": base}


def _gate(argv, monkeypatch, capsys):
    import sys

    from t2i_audit import cli

    monkeypatch.setattr(sys, "argv", ["t2i-audit", "compare", *map(str, argv)])
    monkeypatch.setenv("COLUMNS", "300")
    try:
        cli.main()
        code = 0
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _rows(out: str) -> dict:
    """The printed table: {category: {column: cell}}."""
    lines = out.splitlines()
    head = next(i for i, l in enumerate(lines) if l.startswith("category "))
    cols = re.split(r"\s{2,}", lines[head].strip())
    rows = {}
    for line in lines[head + 2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(cols):
            break
        rows[cells[0]] = dict(zip(cols, cells))
    return rows


def test_a_known_drop_fails_with_the_table_of_its_numbers(runs, tmp_path, monkeypatch, capsys):
    code, out, err = _gate([runs["base"], runs["drop"], "--out", tmp_path / "o", "--fail-on-drop", "0.05"],
                           monkeypatch, capsys)
    assert code == 1, out + err
    rows = _rows(out)
    assert set(rows) == {"color_binding", "spatial", "counting"}
    assert rows["spatial"]["verdict"] == "FAIL" and rows["spatial"]["base"] == "100.0%"
    assert rows["spatial"]["candidate"] == "0.0%" and rows["spatial"]["drop (pts)"] == "+100.0"
    assert rows["spatial"]["groups"] == "16" and rows["spatial"]["images"] == "32"
    assert rows["counting"]["verdict"] == rows["color_binding"]["verdict"] == "ok"
    assert "gate: FAIL — 1 category of drop dropped below base by more than 5.0 points" in err
    # the table holds the page's numbers: the Holm p of differences.parquet, category family
    diffs = pd.read_parquet(tmp_path / "o" / "differences.parquet").set_index(["group", "value"])
    assert rows["spatial"]["p (Holm)"] == f"{diffs.loc[('category', 'spatial'), 'p_holm']:.3f}"


def test_no_drop_passes(runs, tmp_path, monkeypatch, capsys):
    code, out, _ = _gate([runs["base"], runs["same"], "--out", tmp_path / "o", "--fail-on-drop", "0"],
                         monkeypatch, capsys)
    assert code == 0 and "gate: ok" in out
    assert {r["verdict"] for r in _rows(out).values()} == {"ok"}


def test_a_drop_the_page_calls_not_significant_after_holm_does_not_fail(runs, tmp_path, monkeypatch, capsys):
    """4 of 16 spatial prompts fail: a 25-point drop whose raw bootstrap p (≈0.02, CI above 0) does not survive
    Holm over the three categories (≈0.06) — the page marks it not significant, so the gate passes."""
    code, out, err = _gate([runs["base"], runs["holm"], "--out", tmp_path / "o", "--fail-on-drop", "0.05"],
                           monkeypatch, capsys)
    diffs = pd.read_parquet(tmp_path / "o" / "differences.parquet").set_index(["group", "value"])
    d = diffs.loc[("category", "spatial")]
    assert d["p"] < 0.05 and d["lo"] > 0 and d["diff"] == pytest.approx(0.25)  # what the old gate failed on
    assert d["p_holm"] >= 0.05 and not d["significant"]
    assert code == 0, out + err
    assert _rows(out)["spatial"]["verdict"] == "ok" and "gate: ok" in out
    summary = json.loads((tmp_path / "o" / "compare.json").read_text())
    spatial = next(x for x in summary["by_category"] if x["value"] == "spatial")
    assert spatial["p_holm"] == d["p_holm"] and not spatial["significant"]  # one number on page and gate


def test_thin_evidence_is_inconclusive_not_ok(tmp_path, monkeypatch, capsys):
    few = make_prompts(n_binding=4, n_rel=4, n_count=4)  # 2 + 4 + 4 prompt groups
    a = _run(tmp_path / "a", prompts=few)
    b = _run(tmp_path / "b", prompts=few)
    code, out, err = _gate([a, b, "--out", tmp_path / "o", "--fail-on-drop", "0.05"], monkeypatch, capsys)
    assert code == 3, out + err
    assert {r["verdict"] for r in _rows(out).values()} == {"inconclusive"}
    assert "gate: INCONCLUSIVE (exit 3)" in err and "fewer than 10 paired prompt groups in " in err
    assert "gate: ok" not in out


def test_a_category_without_paired_verdicts_is_inconclusive(runs, tmp_path, monkeypatch, capsys):
    """Every counting image of CANDIDATE flagged (black, say): no verdict to pair there, so the gate cannot speak
    of counting — a row with 0 groups, inconclusive, not a silent "ok" over the other categories."""
    cand = _run(tmp_path / "flagged")
    counting = {p["id"] for p in PROMPTS if p["category"] == "counting"}
    path = RunDir(cand).images
    atomic_write_jsonl(path, [{**r, "flags": ["black"]} if r["prompt_id"] in counting else r for r in read_jsonl(path)])
    code, out, err = _gate([runs["base"], cand, "--out", tmp_path / "o", "--fail-on-drop", "0.05"], monkeypatch, capsys)
    assert code == 3, out + err
    rows = _rows(out)
    assert rows["counting"]["verdict"] == "inconclusive" and rows["counting"]["groups"] == "0"
    assert rows["spatial"]["verdict"] == "ok" and "fewer than 10 paired prompt groups in counting" in err


def test_other_settings_are_refused_unless_allowed(runs, tmp_path, monkeypatch, capsys):
    code, out, err = _gate([runs["base"], runs["steps"], "--out", tmp_path / "o", "--fail-on-drop", "0.05"],
                           monkeypatch, capsys)
    assert code == 2 and "steps was made at other settings than base: steps 2 (was 20)" in err
    assert "--allow-different-settings" in err and not (tmp_path / "o").exists()
    code, out, err = _gate([runs["base"], runs["steps"], "--out", tmp_path / "o", "--fail-on-drop", "0.05",
                            "--allow-different-settings"], monkeypatch, capsys)
    assert code == 0, out + err
    assert "settings: steps differs from base: steps 2 (was 20) (--allow-different-settings)" in out
    # without the gate, compare compares them at their own settings and names the difference on the page
    code, out, err = _gate([runs["base"], runs["steps"], "--out", tmp_path / "p"], monkeypatch, capsys)
    assert code == 0 and "<b>steps differs from base:</b> steps 2 (was 20)" in (tmp_path / "p" / "index.html").read_text()


def test_a_run_without_recorded_settings_is_named_by_the_gate(runs, tmp_path, monkeypatch, capsys):
    bare = Path(shutil.copytree(runs["same"], tmp_path / "bare"))
    (bare / "run.yaml").unlink()
    code, _, err = _gate([runs["base"], bare, "--out", tmp_path / "o", "--fail-on-drop", "0.05"], monkeypatch, capsys)
    assert code == 2 and "no run.yaml and no recorded generate settings, so its settings are unknown" in err


def test_a_candidate_covering_part_of_the_base_is_inconclusive(runs, tmp_path, monkeypatch, capsys):
    spatial = [p["id"] for p in PROMPTS if p["category"] == "spatial"]
    part = [p for p in PROMPTS if p["id"] not in spatial[:4]]  # 4 spatial prompts never generated
    cand = _run(tmp_path / "part", prompts=part)
    code, out, err = _gate([runs["base"], cand, "--out", tmp_path / "o", "--fail-on-drop", "0.05"],
                           monkeypatch, capsys)
    assert code == 3, out + err
    assert f"CANDIDATE covers {len(part)} of BASE's {len(PROMPTS)} prompts (4 missing)" in err
    assert {r["verdict"] for r in _rows(out).values()} == {"ok"}  # each category has enough groups: coverage decides


def test_the_gate_is_stated_in_help():
    from typer.testing import CliRunner

    from t2i_audit.cli import app

    text = " ".join(CliRunner().invoke(app, ["compare", "--help"], env={"COLUMNS": "400"}).output.split())
    assert "Holm-corrected over the categories" in text and "Exit 3 (inconclusive)" in text
    assert "fewer than 10 paired prompt groups" in text and "--allow-different-settings" in text
    assert "Runs are ranked together when their protocol is equal" in text  # the one rule, as board states it


def test_gate_options_are_checked_before_anything_is_read(runs, tmp_path, monkeypatch, capsys):
    code, _, err = _gate([runs["base"], runs["same"], "--out", tmp_path / "o", "--allow-different-settings"],
                         monkeypatch, capsys)
    assert code == 2 and "--allow-different-settings is an option of the gate: give --fail-on-drop D" in err
    assert not (tmp_path / "o").exists()


def test_a_damaged_run_yaml_is_named_not_read_as_unknown_settings(runs, tmp_path, monkeypatch, capsys):
    bad = Path(shutil.copytree(runs["same"], tmp_path / "bad"))
    (bad / "run.yaml").write_text("- not\n- a mapping\n")
    code, _, err = _gate([runs["base"], bad, "--out", tmp_path / "o"], monkeypatch, capsys)
    assert code == 2 and f"{bad / 'run.yaml'}: expected a mapping of run settings" in err
    assert not (tmp_path / "o").exists()
