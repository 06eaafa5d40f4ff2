"""`run --images` reads each layout other tools write — GenEval's, T2I-CompBench's, ImageFolder's, a saved Hugging
Face dataset, a CSV manifest — made here from a mini run's images; the ingested run's verdicts equal the mini run's,
image for image and question for question, and its images are the same bytes, their source named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t2i_audit.errors import AuditError
from t2i_audit.rundir import RunDir
from t2i_audit.safeload import load_yaml
from t2i_audit.sources import layouts

from .conftest import cli, ingest, tree, verdicts
from .layouts_from_run import make_layout

LAYOUTS = ["geneval", "t2i-compbench", "imagefolder", "hf-dataset", "hf-parquet", "manifest"]


@pytest.mark.parametrize("made", LAYOUTS)
def test_each_layout_is_detected_and_gives_the_runs_verdicts_image_for_image(made, mini_run, tmp_path):
    if made.startswith("hf-"):
        pytest.importorskip("datasets")
    layout = "hf-dataset" if made == "hf-parquet" else made
    source = make_layout(mini_run, made, tmp_path / "made-elsewhere")
    before = tree(tmp_path / "made-elsewhere")
    assert layouts.detect(str(source)) == layout

    run = ingest(source, tmp_path / "run", name="elsewhere")

    assert verdicts(run) == verdicts(mini_run) and verdicts(run)["mini-judge.jsonl"]
    ours, theirs = RunDir(run).read_images(), RunDir(mini_run).read_images()
    assert [(r["prompt_id"], r["sample"], r["sha256"]) for r in ours] == \
           [(r["prompt_id"], r["sample"], r["sha256"]) for r in theirs]
    assert all(r["source_sha256"] == r["sha256"] and r["source"] and r["model"] == "elsewhere" for r in ours)
    assert tree(tmp_path / "made-elsewhere") == before  # read, never moved or changed
    config = load_yaml(RunDir(run).config)  # what the folder does not say stays unknown, not the generic defaults
    assert (config["steps"], config["guidance"], config["size"], config["dtype"]) == (None, None, None, None)
    generate = RunDir(run).read_manifest()["stages"]["generate"]
    assert generate["status"] == "done" and generate["ingest"]["layout"] == layout
    assert generate["ingest"]["matched"] == 8 and generate["ingest"]["prompts_without_images"] == 0


def test_a_folder_with_two_layouts_marks_asks_for_layout_and_layout_forces_one(mini_run, tmp_path):
    folder = make_layout(mini_run, "geneval", tmp_path / "both")
    (folder / "metadata.jsonl").write_text(json.dumps({"file_name": "00000/samples/0000.png",
                                                       "prompt": "a red square and an orange cross"}) + "\n")
    with pytest.raises(AuditError, match=r"several layouts \(geneval, imagefolder\).*--layout geneval \| imagefolder"):
        layouts.detect(str(folder))
    run = ingest(folder, tmp_path / "run", layout="geneval")
    assert verdicts(run) == verdicts(mini_run)
    assert RunDir(run).read_manifest()["model"]["source_options"] == {"layout": "geneval"}


def test_an_unrecognised_folder_names_what_was_looked_for(tmp_path, capsys):
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "cat.png").write_bytes(b"not really")
    assert cli("run", "--images", tmp_path / "pics", "--prompts", "mini", "--out", tmp_path / "run") == 2
    err = capsys.readouterr().err
    assert "no layout of images recognised" in err and str(tmp_path / "pics") in err
    for mod in layouts.LAYOUTS:
        assert layouts.module(mod).LOOKS_FOR in err
    assert not (tmp_path / "run").exists()


def test_cli_run_images_scores_reports_verifies_compares_and_boards(mini_run, tmp_path, capsys):
    source = make_layout(mini_run, "t2i-compbench", tmp_path / "compbench")
    out = tmp_path / "run"
    assert cli("run", "--images", source, "--prompts", "mini", "--limit", "4", "-n", "2", "--name", "elsewhere",
               "--scorer", "mini-judge", "--scorer", "mini-pixel", "--device", "cpu", "--out", out, "-q") == 0
    err = capsys.readouterr().err
    assert "8 images matched 4 of 4 prompts (-n 2)" in err and "[probe] skipped" in err
    assert (out / "report" / "index.html").is_file()
    assert verdicts(out) == verdicts(mini_run)
    assert cli("verify", out) == 0
    assert cli("compare", mini_run, out, "--out", tmp_path / "cmp") == 0
    assert (tmp_path / "cmp" / "index.html").is_file()
    assert cli("board", mini_run, out, "--out", tmp_path / "board", "-q") == 0
    page = (tmp_path / "board" / "index.html").read_text(encoding="utf-8")
    assert "elsewhere" in page
    # the same command again resumes: nothing is copied again, nothing changes
    images = RunDir(out).images.read_bytes()
    assert cli("run", "--images", source, "--prompts", "mini", "--limit", "4", "-n", "2", "--name", "elsewhere",
               "--scorer", "mini-judge", "--scorer", "mini-pixel", "--device", "cpu", "--out", out, "-q",
               "--stages", "prompts,generate") == 0
    assert RunDir(out).read_manifest()["stages"]["generate"]["generated_now"] == 0
    assert RunDir(out).images.read_bytes() == images


def test_a_hub_dataset_reference_is_checked_before_any_download():
    pytest.importorskip("datasets")
    for bad in ("hf:justaname", "hf:a/b/c/d", "hf:/x"):
        with pytest.raises(AuditError, match=r"expected hf:ORG/NAME\[/CONFIG\]\[:SPLIT\]"):
            layouts.read(bad)


def test_images_and_a_model_together_or_a_layout_for_a_pipeline_are_refused(mini_run, tmp_path, capsys):
    folder = make_layout(mini_run, "imagefolder", tmp_path / "pics")
    assert cli("run", "--model", "mini", "--images", folder, "--prompts", "mini", "--out", tmp_path / "a") == 2
    assert "give --model (a model that makes the images) or --images" in capsys.readouterr().err
    assert cli("run", "--model", "mini", "--layout", "geneval", "--prompts", "mini", "--out", tmp_path / "b") == 2
    assert "a layout belongs to images read from a folder" in capsys.readouterr().err
    assert cli("run", "--images", folder, "--layout", "genevall", "--prompts", "mini", "--out", tmp_path / "c") == 2
    assert "--layout 'genevall': not a layout t2i-audit reads" in capsys.readouterr().err
    assert not any((tmp_path / x).exists() for x in "abc")
