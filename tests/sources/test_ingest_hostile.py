"""A folder made elsewhere is somebody's files: a file that is no image, a truncated PNG, a link out of the folder, a
FIFO, two images of one prompt and sample, an image of no prompt of the suite, a metadata table without its prompt
column, a broken metadata line — each is an error that names the file (and line), exit 2, before the run folder is
made; the folder is left byte for byte as it was. A run is never resumed from a folder whose images changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from t2i_audit.rundir import RunDir

from .conftest import cli, ingest, tree
from .layouts_from_run import make_layout


def _imagefolder(mini_run, tmp_path) -> Path:
    return make_layout(mini_run, "imagefolder", tmp_path / "pics")


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metadata.jsonl").read_text().splitlines()]


def _write_rows(folder: Path, rows: list[dict]) -> None:
    (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _not_an_image(folder, tmp_path):
    (folder / "img0_0.png").write_bytes(b"GIF? no: a text file named .png\n")
    return [str(folder / "img0_0.png"), "not a readable image"]


def _truncated(folder, tmp_path):
    data = (folder / "img0_0.png").read_bytes()
    (folder / "img0_0.png").write_bytes(data[: len(data) // 2])
    return [str(folder / "img0_0.png"), "not a readable image"]


def _link_out(folder, tmp_path):
    secret = tmp_path / "outside.png"
    secret.write_bytes((folder / "img0_0.png").read_bytes())
    (folder / "img0_0.png").unlink()
    (folder / "img0_0.png").symlink_to(secret)
    return ["img0_0.png points outside", str(secret)]


def _fifo(folder, tmp_path):
    (folder / "img0_0.png").unlink()
    os.mkfifo(folder / "img0_0.png")
    return [str(folder / "img0_0.png"), "FIFO"]


def _duplicate(folder, tmp_path):
    rows = _rows(folder)
    twin = dict(rows[0], file_name="copy.png")
    (folder / "copy.png").write_bytes((folder / rows[0]["file_name"]).read_bytes())
    _write_rows(folder, rows + [twin])
    return [f"metadata.jsonl:{len(rows) + 1}: copy.png is a second image", rows[0]["file_name"]]


def _unmatched(folder, tmp_path):
    rows = _rows(folder)
    rows[3]["prompt"] = "a purple elephant riding a bicycle"
    _write_rows(folder, rows)
    return ["metadata.jsonl:4: no prompt of the suite reads 'a purple elephant riding a bicycle'"]


def _no_prompt_column(folder, tmp_path):
    _write_rows(folder, [{k: v for k, v in r.items() if k != "prompt"} for r in _rows(folder)])
    return ["metadata.jsonl:1: no prompt / text / caption / prompt_id column (columns: file_name, sample)"]


def _broken_line(folder, tmp_path):
    text = (folder / "metadata.jsonl").read_text().splitlines()
    text[2] = text[2][:-5]
    (folder / "metadata.jsonl").write_text("\n".join(text) + "\n")
    return ["metadata.jsonl:3"]


CASES = {"not an image": _not_an_image, "truncated PNG": _truncated, "link out of the folder": _link_out,
         "FIFO": _fifo, "duplicate sample": _duplicate, "unmatched prompt": _unmatched,
         "missing prompt column": _no_prompt_column, "broken metadata line": _broken_line}


@pytest.mark.parametrize("case", CASES)
def test_hostile_folder_is_a_located_error_exit_2_and_nothing_is_touched(case, mini_run, tmp_path, capsys):
    folder = _imagefolder(mini_run, tmp_path)
    said = CASES[case](folder, tmp_path)
    before = tree(folder)
    out = tmp_path / "run"
    code = cli("run", "--images", folder, "--prompts", "mini", "--limit", "4", "-n", "2", "--device", "cpu",
               "--scorer", "mini-pixel", "--out", out, "-q")
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err
    for part in said:
        assert part in err, err
    assert tree(folder) == before
    assert not out.exists()  # checked before the run folder is claimed: nothing written


def test_a_real_process_exits_2_on_a_truncated_png(mini_run, tmp_path):
    folder = _imagefolder(mini_run, tmp_path)
    _truncated(folder, tmp_path)
    r = subprocess.run([sys.executable, "-m", "t2i_audit.cli", "run", "--images", str(folder), "--prompts", "mini",
                        "--limit", "4", "-n", "2", "--scorer", "mini-pixel", "--out", str(tmp_path / "run"), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.startswith(f"error: {folder / 'img0_0.png'} (") , r.stderr
    assert "metadata.jsonl:1): not a readable image (OSError: image file is truncated)" in r.stderr
    assert not (tmp_path / "run").exists()


def test_a_link_inside_the_folder_is_read_as_its_file(mini_run, tmp_path):
    folder = _imagefolder(mini_run, tmp_path)
    (folder / "sub").mkdir()
    os.replace(folder / "img0_0.png", folder / "sub" / "real.png")
    (folder / "img0_0.png").symlink_to(folder / "sub" / "real.png")
    run = ingest(folder, tmp_path / "run")
    assert RunDir(run).read_images()[0]["source"] == "img0_0.png"


def test_a_changed_image_is_never_resumed_into_the_run_made_from_the_old_one(mini_run, tmp_path, capsys):
    folder = _imagefolder(mini_run, tmp_path)
    run = ingest(folder, tmp_path / "run")
    kept = tree(run)
    (folder / "img0_0.png").write_bytes((folder / "img1_0.png").read_bytes())  # another, valid image

    argv = ["run", "--images", folder, "--prompts", "mini", "--limit", "4", "-n", "2", "--device", "cpu",
            "--scorer", "mini-judge", "--scorer", "mini-pixel", "--stages", "prompts,generate,score", "--out", run,
            "-q"]
    assert cli(*argv) == 2
    err = capsys.readouterr().err
    assert "was made from other images" in err and f"{folder / 'img0_0.png'}: sha256" in err
    assert tree(run) == kept
    # the old images back: the same command resumes the run (nothing to copy again)
    (folder / "img0_0.png").write_bytes((mini_run / RunDir(mini_run).read_images()[0]["path"]).read_bytes())
    assert cli(*argv) == 0
    assert RunDir(run).read_manifest()["stages"]["generate"]["generated_now"] == 0
