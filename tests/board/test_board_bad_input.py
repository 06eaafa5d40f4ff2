"""Bad input to `t2i-audit board`: runs of other suites, damaged or half-finished runs, a folder that is not a
board, a board file edited by hand. Each: exit 2 with the place named, nothing written, never a traceback."""

import json
import shutil

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boardkit import PROMPTS, invoke, reported_run, snapshot
from synth import make_prompts


def _refused(code, err, *where):
    assert code == 2, err
    assert "Traceback" not in err
    for w in where:
        assert str(w) in err, err


def test_runs_of_another_suite_are_set_apart_or_compared_on_shared_prompts(runs, tmp_path, monkeypatch, capsys):
    other = make_prompts(suite="spatial", n_binding=4, n_rel=8, n_count=2)  # same generator: some texts shared
    run = reported_run(tmp_path / "spatial", skill=0.7, model="model-x", prompts=other)
    out = tmp_path / "board"
    code, stdout, _ = invoke(["board", runs["good"], run, "--out", out], monkeypatch, capsys)
    assert code == 0
    assert "set apart from G1: suite spatial@1 (G1: colors@1)" in stdout
    shared = {p["text"] for p in PROMPTS} & {p["text"] for p in other}
    out2 = tmp_path / "board2"
    code, stdout, _ = invoke(["board", runs["good"], run, "--out", out2, "--allow-different-suites"], monkeypatch, capsys)
    assert code == 0 and "set apart" not in stdout
    assert f"G1: images_per_prompt 2 — {len(shared)} shared prompts" in stdout  # the protocol, suites aside
    assert f"compared only on the {len(shared)} prompts they share" in (out2 / "index.html").read_text()


def _no_report(run):
    shutil.rmtree(run / "report")
    return run / "report" / "results.parquet", "no finished report", "t2i-audit report"


def _generating(run):
    m = json.loads((run / "manifest.json").read_text())
    m["stages"]["generate"]["status"] = "running"
    (run / "manifest.json").write_text(json.dumps(m))
    return run / "manifest.json", "stage generate is 'running', not done: a half-finished run"


def _rows_cut(run):
    path = run / "report" / "results.parquet"
    pd.read_parquet(path).head(10).to_parquet(path)
    return path, "10 rows, but the report recorded", "edited or damaged after the report"


def _not_parquet(run):
    path = run / "report" / "results.parquet"
    path.write_bytes(b"PAR1 not really")
    return path, "not a readable Parquet file"


def _verdicts_as_text(run):
    path = run / "report" / "results.parquet"
    df = pd.read_parquet(path)
    df["clip-foil.verdict"] = df["clip-foil.verdict"].map(lambda v: "false" if v is False else "true")
    df.to_parquet(path)
    return path, "column clip-foil.verdict holds", "not verdicts"


def _scores_gone(run):
    (run / "scores" / "vqa-blip.jsonl").unlink()
    return run / "scores" / "vqa-blip.jsonl", "missing, but", "has its verdicts"


def _torn_prompts(run):
    path = run / "prompts.jsonl"
    lines = path.read_text().split("\n")
    lines[2] = lines[2][:20]
    path.write_text("\n".join(lines))
    return f"{path}:3", "corrupted JSONL line"


def _no_run(run):
    shutil.rmtree(run)
    return run, "RUN", "not found"


def _empty_run(run):
    shutil.rmtree(run)
    run.mkdir()
    return run, "empty folder"


@pytest.mark.parametrize("damage", [_no_report, _generating, _rows_cut, _not_parquet, _verdicts_as_text, _scores_gone,
                                    _torn_prompts, _no_run, _empty_run], ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_or_half_finished_run_is_named_and_nothing_is_written(damage, own_runs, tmp_path, monkeypatch,
                                                                        capsys):
    out = tmp_path / "board"
    assert invoke(["board", own_runs["good"], "--out", out, "-q"], monkeypatch, capsys)[0] == 0
    where, *why = damage(own_runs["bad"])
    before, runs_before = snapshot(out), snapshot(own_runs["bad"])
    code, _, err = invoke(["board", own_runs["bad"], "--out", out], monkeypatch, capsys)
    _refused(code, err, where, *why)
    assert snapshot(out) == before and snapshot(own_runs["bad"]) == runs_before
    fresh = tmp_path / "fresh"
    code, _, err = invoke(["board", own_runs["bad"], "--out", fresh], monkeypatch, capsys)
    _refused(code, err, where)
    assert not fresh.exists()  # a new board is not even claimed


def test_a_folder_that_is_not_a_board_is_refused_untouched(runs, tmp_path, monkeypatch, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    before = snapshot(tmp_path)
    code, _, err = invoke(["board", runs["good"], "--out", mine], monkeypatch, capsys)
    _refused(code, err, mine, "not made by t2i-audit")
    code, _, err = invoke(["board", runs["good"], "--out", runs["bad"]], monkeypatch, capsys)  # a run folder
    _refused(code, err, runs["bad"], "holds a t2i-audit run, not a board")
    assert snapshot(tmp_path) == before


@pytest.fixture
def built(runs, tmp_path, monkeypatch, capsys):
    out = tmp_path / "board"
    assert invoke(["board", runs["good"], runs["bad"], "--out", out, "-q"], monkeypatch, capsys)[0] == 0
    return out


@pytest.mark.parametrize("table", ["images", "questions", "categories"])
def test_a_board_parquet_edited_by_hand_is_named_and_kept(built, runs, table, monkeypatch, capsys):
    index = json.loads((built / "board.json").read_text())
    rec = index["snapshots"][0]["files"].get(table) or index["runs"][1]["files"][table]
    path = built / rec["path"]
    df = pd.read_parquet(path)
    df.iloc[0, df.columns.get_loc("run_id")] = "someone-else"
    df.to_parquet(path)
    before = snapshot(built)
    code, _, err = invoke(["board", runs["seed1"], "--out", built], monkeypatch, capsys)
    _refused(code, err, path, "changed since the board wrote it", "edited by hand")
    assert snapshot(built) == before


@pytest.mark.parametrize("edit,why", [
    (lambda t: t[: len(t) // 2], "not valid JSON"),
    (lambda t: t.replace('"data/images/', '"../../outside/'), "not a file record of this board"),
    (lambda t: t.replace('"version": 1', '"version": 9'), "board version 9"),
], ids=["torn", "path-outside", "version"])
def test_a_damaged_board_index_is_named(built, edit, why, runs, monkeypatch, capsys):
    path = built / "board.json"
    path.write_text(edit(path.read_text()))
    before = snapshot(built)
    code, _, err = invoke(["board", runs["seed1"], "--out", built], monkeypatch, capsys)
    _refused(code, err, path, why)
    assert snapshot(built) == before


def test_a_new_board_needs_a_run(tmp_path, monkeypatch, capsys):
    code, _, err = invoke(["board", "--out", tmp_path / "b"], monkeypatch, capsys)
    _refused(code, err, "a new board needs at least one run")
    assert not (tmp_path / "b").exists()


def _paths(value, at=()):
    """Every key path of a JSON value (dicts and lists)."""
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, at + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, at + (i,))


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=6)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_edit_of_the_index_is_refused_with_its_place_or_read_never_a_traceback(built, data):
    """Property: whatever value replaces whatever part of board.json, a build either works or stops with an
    AuditError naming board.json (nothing written then); no other exception reaches the user."""
    import copy

    from t2i_audit.board import build_board
    from t2i_audit.errors import AuditError

    path = built / "board.json"
    pristine = json.loads(path.read_text())
    where = data.draw(st.sampled_from([p for p in _paths(pristine) if p]))
    edited = copy.deepcopy(pristine)
    node = edited
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = data.draw(JSON)
    path.write_text(json.dumps(edited))
    before = snapshot(built)
    try:
        build_board(built, [])
    except AuditError as e:
        assert str(path) in str(e) or "board.json" in str(e) or str(built) in str(e), str(e)
        assert snapshot(built) == before
    finally:
        path.write_text(json.dumps(pristine))
