"""The board folder as the Hugging Face `datasets` library reads it (a dev extra): every table, every split, the
round trip to each run's own results.parquet, images embedded or in ImageFolder layout; the Hub's eval-results
files and the push (a dry run lists; the real one goes through huggingface_hub's create_repo + upload_folder)."""

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from boardkit import invoke, snapshot

datasets = pytest.importorskip("datasets")


def _load(board: Path, table: str, split: str = "latest", tmp: Path | None = None):
    return datasets.load_dataset(str(board), table, split=split, cache_dir=str(tmp) if tmp else None)


def _plain(v):
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _plain(x)) for k, x in v.items()))
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return v


def _records(df: pd.DataFrame, cols) -> list:
    return sorted((tuple(_plain(v) for v in row) for row in df[cols].itertuples(index=False)), key=repr)


@pytest.fixture(scope="module")
def board(runs, tmp_path_factory):
    from t2i_audit.board import build_board

    out = tmp_path_factory.mktemp("ds") / "board"
    build_board(out, [runs["good"], runs["bad"]])
    build_board(out, [runs["seed1"], runs["g3"]])  # a second snapshot
    return out


def test_every_table_loads_latest_and_each_snapshot(board, tmp_path):
    index = json.loads((board / "board.json").read_text())
    first, second = (s["split"] for s in index["snapshots"])
    for table in ("runs", "categories", "comparisons", "questions", "images", "probes"):
        latest = _load(board, table, tmp=tmp_path).to_pandas()
        files = index["snapshots"][-1]["files"]
        paths = [files[table]["path"]] if table in files else [r[table]["path"] for r in index["snapshots"][-1]["runs"]]
        written = pd.concat([pd.read_parquet(board / p) for p in paths], ignore_index=True)
        assert len(latest) == len(written) > 0, table
        assert _records(latest, list(written.columns)) == _records(written, list(written.columns)), table
        assert len(_load(board, table, second, tmp_path)) == len(latest)
    early = _load(board, "questions", first, tmp_path).to_pandas()
    assert set(early["run_id"]) == {"good", "bad"}
    assert set(_load(board, "runs", tmp=tmp_path).to_pandas()["run_id"]) == {"good", "bad", "seed1", "g3"}


def test_questions_round_trip_to_each_runs_results_parquet(board, runs, tmp_path):
    q = _load(board, "questions", tmp=tmp_path).to_pandas()
    for rid, run in runs.items():
        res = pd.read_parquet(Path(run) / "report" / "results.parquet")
        mine = q[q["run_id"] == rid]
        judges = [c[: -len(".verdict")] for c in res.columns if c.endswith(".verdict")]
        assert sorted(mine["judge"].unique()) == sorted(judges)
        key = ["prompt_id", "sample", "question_id"]
        back = mine[mine["judge"] == judges[0]].drop(columns=["judge"]).set_index(key)
        for j in judges:  # the long rows, pivoted back to the report's wide columns
            part = mine[mine["judge"] == j].set_index(key)
            back[f"{j}.verdict"], back[f"{j}.value"] = part["verdict"], part["score"]
            back[f"{j}.image_verdict"] = part["image_verdict"]
        own = mine[mine["deciding"]].set_index(key)
        back["verdict"] = own["verdict"]
        back["decided_by"] = own["judge"]
        back = back.reset_index()
        assert len(back) == len(res)
        assert _records(back, list(res.columns)) == _records(res, list(res.columns)), rid
        assert set(mine["judge_model"]) == {f"{j}-tiny" for j in judges} and set(mine["judge_revision"]) == {"0"}


def test_images_table_carries_each_judges_verdict_and_failures(board, runs, tmp_path):
    im = _load(board, "images", tmp=tmp_path).to_pandas()
    res = pd.read_parquet(Path(runs["bad"]) / "report" / "results.parquet").drop_duplicates(["prompt_id", "sample"])
    mine = im[(im["run_id"] == "bad") & im["deciding"]].set_index(["prompt_id", "sample"])
    assert len(mine) == len(res)
    for _, r in res.iterrows():
        got = mine.loc[(r["prompt_id"], r["sample"])]
        assert got["judge"] == r["decided_by"]
        assert _plain(got["image_verdict"]) == _plain(r[f"{r['decided_by']}.image_verdict"])
        if got["image_verdict"] is False or got["image_verdict"] == False:  # noqa: E712
            assert len(got["failure_types"]) > 0


@pytest.mark.parametrize("mode", ["embed", "folder"])
def test_images_embedded_or_in_imagefolder_layout(runs, tmp_path, mode, monkeypatch, capsys):
    from PIL import Image

    out = tmp_path / "board"
    code, stdout, err = invoke(["board", runs["bad"], "--out", out, "--images", mode, "-q"], monkeypatch, capsys)
    assert code == 0, err
    if mode == "embed":
        ds = _load(out, "images", tmp=tmp_path / "cache")
    else:  # ImageFolder layout: one builder reads a repo, so the images load as their own dataset
        ds = datasets.load_dataset("imagefolder", data_dir=str(out / "images"), split="train",
                                   cache_dir=str(tmp_path / "cache"))
    row = ds[0]
    png = Path(runs["bad"]) / "images" / row["prompt_id"] / f"{row['sample']}.png"
    with Image.open(png) as want:
        assert np.array_equal(np.asarray(row["image"].convert("RGB")), np.asarray(want.convert("RGB")))
    n_images = len(pd.read_parquet(Path(runs["bad"]) / "report" / "results.parquet")[["prompt_id", "sample"]]
                   .drop_duplicates())
    assert len(ds) == (2 * n_images if mode == "embed" else n_images)  # embed: one row per image and judge
    if mode == "folder":
        assert {"verdict", "failure_types", "judge"} <= set(ds.features)
    code, _, err = invoke(["board", runs["good"], "--out", out, "--images", "none"], monkeypatch, capsys)
    assert code == 2 and f"the board {out} holds images as '{mode}'" in err


def test_eval_results_and_dry_run_push(board, monkeypatch, capsys):
    code, stdout, err = invoke(["board", "--out", board, "--push-to-hub", "me/t2i-board", "--dry-run"],
                               monkeypatch, capsys)
    assert code == 0, err
    assert "dry run: would send" in stdout and "me/t2i-board" in stdout
    listed = [line.split()[0] for line in stdout.splitlines() if line.startswith("  ")]
    assert "README.md" in listed and "index.html" in listed
    assert any(p.startswith("data/questions/") for p in listed)
    assert "board.json" not in listed and ".t2i-audit.json" not in listed  # this machine's paths stay here
    evals = sorted(p for p in listed if "/.eval_results/" in p)
    assert evals and all(p.startswith("eval_results/model-") for p in evals)
    cats = pd.read_parquet(board / json.loads((board / "board.json").read_text())["snapshots"][-1]["files"]["categories"]["path"])
    path = next(p for p in evals if p.endswith("__bad.yaml"))
    entries = yaml.safe_load((board / path).read_text())
    mine = cats[cats["run_id"] == "bad"].set_index("category")
    assert {e["dataset"]["task_id"] for e in entries} == set(mine.index)
    for e in entries:
        assert set(e) == {"dataset", "value", "date", "source", "notes"}
        assert e["dataset"]["id"] == "me/t2i-board" and e["source"]["url"] == "https://huggingface.co/datasets/me/t2i-board"
        assert e["value"] == round(100 * mine.loc[e["dataset"]["task_id"], "rate"], 2)
    readme = (board / "README.md").read_text()
    assert 'load_dataset("me/t2i-board", "categories", split="latest")' in readme
    assert "once this dataset is registered as a benchmark on the Hub" in readme


def test_push_goes_through_create_repo_and_upload_folder(board, monkeypatch, capsys):
    import huggingface_hub

    calls = []

    class Recorder:
        def create_repo(self, repo_id, **kw):
            calls.append(("create_repo", repo_id, kw))

        def upload_folder(self, **kw):
            calls.append(("upload_folder", kw))

    monkeypatch.setattr(huggingface_hub, "HfApi", Recorder)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # the push is checked for before the build
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    code, stdout, err = invoke(["board", "--out", board, "--push-to-hub", "me/t2i-board", "-q"], monkeypatch, capsys)
    assert code == 0, err
    (_, repo, kw), (_, up) = calls
    assert repo == "me/t2i-board" and kw == {"repo_type": "dataset", "private": False, "exist_ok": True}
    assert up["repo_id"] == "me/t2i-board" and up["repo_type"] == "dataset" and Path(up["folder_path"]) == board
    from t2i_audit.board.hub import files_to_send

    assert up["allow_patterns"] == [p for p, _ in files_to_send(board)]
    assert "sent" in stdout and "https://huggingface.co/datasets/me/t2i-board" in stdout


def test_push_offline_is_a_clear_error_and_the_board_stays(board, monkeypatch, capsys):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    code, _, err = invoke(["board", "--out", board, "--push-to-hub", "me/t2i-board", "-q"], monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err
    assert "error: --push-to-hub me/t2i-board: HF_HUB_OFFLINE is set, so nothing was sent" in err
    before = snapshot(board)
    assert invoke(["board", "--out", board, "--push-to-hub", "not a repo", "-q"], monkeypatch, capsys)[0] == 2
    assert snapshot(board) == before
    assert invoke(["board", "--out", board, "--dry-run"], monkeypatch, capsys)[0] == 2
