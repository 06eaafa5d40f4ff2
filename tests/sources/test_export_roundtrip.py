"""`prompts export --layout` hands a suite to another generator: the prompt file it reads, prompts.jsonl and
expected.txt (the images it must write back). Put the mini run's images where expected.txt says, ingest the folder
with the exported prompts.jsonl, and the verdicts are the mini run's, image for image."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from t2i_audit.generate import image_seed
from t2i_audit.rundir import RunDir

from .conftest import cli, ingest, verdicts


@pytest.mark.parametrize("layout", ["geneval", "t2i-compbench", "imagefolder"])
def test_export_then_the_generators_files_back_give_the_same_verdicts(layout, mini_run, tmp_path, capsys):
    exported = tmp_path / "handed-over"
    assert cli("prompts", "export", "mini", "--limit", "4", "-n", "2", "--layout", layout, "--out", exported) == 0
    said = capsys.readouterr().out
    records = [json.loads(line) for line in (exported / "prompts.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == [r["id"] for r in RunDir(mini_run).read_prompts()]
    expected = (exported / "expected.txt").read_text().splitlines()
    assert len(expected) == 8 and f"expected back: 8 images" in said and str(exported / "expected.txt") in said
    given = {"geneval": "evaluation_metadata.jsonl", "t2i-compbench": "prompts.txt",
             "imagefolder": "metadata.jsonl"}[layout]
    assert f"give the generator: {exported / given}" in said

    # the other generator's work: expected.txt's line j is record j // n, sample j % n
    images = {(r["prompt_id"], r["sample"]): mini_run / r["path"] for r in RunDir(mini_run).read_images()}
    back = exported if layout == "imagefolder" else tmp_path / "outdir"
    for j, name in enumerate(expected):
        target = back / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(images[(records[j // 2]["id"], j % 2)], target)
    if layout == "geneval":  # GenEval's script writes each line's object beside its samples
        for i, line in enumerate((exported / "evaluation_metadata.jsonl").read_text().splitlines()):
            (back / f"{i:05d}" / "metadata.jsonl").write_text(line + "\n")

    run = ingest(back, tmp_path / "run", prompts=str(exported / "prompts.jsonl"), limit=None)
    assert verdicts(run) == verdicts(mini_run)
    assert RunDir(run).read_manifest()["stages"]["generate"]["ingest"]["layout"] == layout


def test_imagefolder_export_names_each_image_with_the_seed_the_pipeline_uses(tmp_path, capsys):
    out = tmp_path / "x"
    assert cli("prompts", "export", "mini", "--limit", "2", "-n", "3", "--seed", "5", "--layout", "imagefolder",
               "--out", out) == 0
    rows = [json.loads(line) for line in (out / "metadata.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert all(r["seed"] == image_seed(r["prompt_id"], r["sample"], 5) for r in rows)
    assert [r["file_name"] for r in rows] == (out / "expected.txt").read_text().splitlines()


def test_geneval_export_keeps_an_imported_line_and_compbench_refuses_a_text_no_file_name_can_hold(tmp_path, capsys):
    from t2i_audit.sources.export import export_layout
    from t2i_audit.errors import AuditError

    meta = {"tag": "color_attr", "include": [{"class": "bench", "count": 1, "color": "red"}],
            "prompt": "a photo of a red bench"}
    rec = {"id": "pabc", "text": "a photo of a red bench", "category": "color_attr", "source": "geneval",
           "source_meta": meta, "objects": []}
    export_layout([rec], "geneval", tmp_path / "g")
    assert json.loads((tmp_path / "g" / "evaluation_metadata.jsonl").read_text()) == {**meta, "t2i_audit_id": "pabc"}
    with pytest.raises(AuditError, match=r"prompt pabc \('a cat/dog'\).*cannot hold '/'"):
        export_layout([dict(rec, text="a cat/dog")], "t2i-compbench", tmp_path / "c")


def test_export_refuses_a_folder_holding_a_users_files(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert cli("prompts", "export", "mini", "--layout", "geneval", "--out", out) == 2
    assert (out / "notes.txt").read_text() == "keep me" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]
