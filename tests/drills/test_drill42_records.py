"""Two properties of every reader of a run's records (issue 42's drill), over every registered record kind
(:data:`t2i_audit.records.RECORD_KINDS`), so a kind added later is held to them too:

* **a key once**: every JSONL kind names the fields that identify a record (a prompt's id, an image's prompt and
  sample, a score's image, question and metric …); a plain read refuses a record whose key an earlier line holds,
  at ``file:line``. Where appending legitimately repeats a key (shards, a score stage in progress), the kind says
  its merge's rule and only that merge reads the repeats.
* **a finished file whole**: a file whose stage finished (see the second half) is read only with the lines the
  stage wrote.

The drill's reproducers go through the entry point: before, a prompt id twice moved images to another category and
``verify`` called the run clean; an image line twice was counted twice by ``report``.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

from t2i_audit.errors import AuditError
from t2i_audit.records import RECORD_KINDS, read_records
from t2i_audit.verify import verify_run

from ..spine.test_command_properties import invoke
from .test_record_kinds import SAMPLES, _write

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from synth import make_prompts, make_run  # noqa: E402

JSONL_KINDS = sorted(k for k, spec in RECORD_KINDS.items() if spec.lines)


def test_every_jsonl_kind_names_its_key_and_any_repeat_its_merge():
    for kind in JSONL_KINDS:
        spec = RECORD_KINDS[kind]
        assert spec.key, f"{kind}: a JSONL kind names the fields that identify a record"
        assert set(spec.key) <= set(spec.model().model_fields), (kind, spec.key)
        assert spec.unique or spec.repeats, f"{kind}: repeats allowed without the merge's rule"


@pytest.mark.parametrize("kind", JSONL_KINDS)
def test_a_repeated_key_is_refused_by_the_one_reader_at_its_line(kind):
    spec = RECORD_KINDS[kind]
    record = SAMPLES[kind]
    other = copy.deepcopy(record)
    field = spec.key[-1]
    other[field] = other[field] + 1 if isinstance(other[field], int) else f"{other[field]}x"
    assert len(read_records(_write(kind, [record, other]), kind)) == 2  # other keys: read as they are
    path = _write(kind, [record, other, dict(record, **{f: v for f, v in record.items() if f not in spec.key})])
    if not spec.unique:  # every reader of the kind is its merge (shards): the repeats reach it
        assert len(read_records(path, kind)) == 3 and spec.repeats
        return
    with pytest.raises(AuditError) as e:
        read_records(path, kind)
    assert str(e.value).startswith(f"{path}:3: {kind} record "), str(e.value)
    assert "repeats line 1" in str(e.value) and spec.advice(path) in str(e.value)
    from t2i_audit.records import repeats_in

    assert [(i, j) for i, j, _ in repeats_in(kind, [(1, record), (2, other), (3, record)])] == [(3, 1)]
    if spec.repeats:  # e.g. scores: a stage in progress appends; its merge reads them and folds them
        assert len(read_records(path, kind, merging=True)) == 3


@pytest.fixture
def synth_run(tmp_path) -> Path:
    return make_run(tmp_path / "run", prompts=make_prompts(n_binding=4, n_rel=2, n_count=2), samples=2, black=0,
                    scorers=("clip-foil",), probes=False)


def _report(run: Path, tmp_path, monkeypatch, capsys) -> tuple:
    return invoke(["report", str(run), "-q"], tmp_path, monkeypatch, capsys)


def test_a_prompt_id_twice_is_refused_and_verify_names_it(synth_run, tmp_path, monkeypatch, capsys):
    """Before: the second line's category won, the prompt's images moved to it, and verify said clean."""
    lines = (synth_run / "prompts.jsonl").read_text().splitlines()
    moved = dict(json.loads(lines[0]), category="counting")
    with open(synth_run / "prompts.jsonl", "a") as f:
        f.write(json.dumps(moved) + "\n")
    code, out = _report(synth_run, tmp_path, monkeypatch, capsys)
    assert code == 2 and "Traceback" not in out, out
    assert f"prompts.jsonl:{len(lines) + 1}: prompts record id '{moved['id']}' repeats line 1" in out, out
    result = verify_run(synth_run)
    assert not result["ok"]
    problem = next(p for p in result["problems"] if p["category"] == "records")
    assert problem["path"] == "prompts.jsonl" and f"line {len(lines) + 1}" in problem["problem"]


def test_an_image_line_twice_is_refused_not_counted_twice(synth_run, tmp_path, monkeypatch, capsys):
    lines = (synth_run / "images.jsonl").read_text().splitlines()
    with open(synth_run / "images.jsonl", "a") as f:
        f.write(lines[2] + "\n")
    code, out = _report(synth_run, tmp_path, monkeypatch, capsys)
    assert code == 2 and f"images.jsonl:{len(lines) + 1}: images record prompt_id" in out and "repeats line 3" in out
    assert any(p["path"] == "images.jsonl" for p in verify_run(synth_run)["problems"] if p["category"] == "records")


# --- a finished file whole --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, repo_root) -> Path:
    """A mini run of 4 prompts × 2 images, generated and scored by the pixel judge: every stage finished."""
    from t2i_audit import api

    out = tmp_path_factory.mktemp("finished") / "run"
    cfg = api.make_config(dict(model="mini", prompts=[str(repo_root / "prompts/mini.yaml")], limit=4,
                               images_per_prompt=2, steps=2, scorers=["mini-pixel"],
                               stages=["prompts", "generate", "score"], out=str(out), device="cpu"))
    return Path(api.run_audit(cfg, progress=False))


@pytest.fixture
def own_run(finished_run, tmp_path) -> Path:
    import shutil

    return Path(shutil.copytree(finished_run, tmp_path / "run"))


def _cut_last_line(path: Path) -> int:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))
    return len(lines)


def test_each_finished_file_is_recorded_with_its_lines(finished_run):
    from t2i_audit.finished_files import FINISHED
    from t2i_audit.rundir import RunDir

    table = RunDir(finished_run).read_manifest()[FINISHED]
    assert table == {"prompts.jsonl": 4, "images.jsonl": 8, "scores/mini-pixel.jsonl": len(
        (finished_run / "scores/mini-pixel.jsonl").read_text().splitlines())}


@pytest.mark.parametrize("rel", ["prompts.jsonl", "images.jsonl", "scores/mini-pixel.jsonl"])
def test_a_finished_file_cut_short_is_refused_by_its_reader_and_named_by_verify(own_run, rel):
    """The property over every file a stage finished (each file manifest.json records): its last line cut, the
    one reader of its kind refuses at the line where it ends, and verify names it as cut short."""
    from t2i_audit.records import kind_of
    from t2i_audit.rundir import RunDir

    assert rel in RunDir(own_run).read_manifest()["finished"]
    path = own_run / rel
    n = _cut_last_line(path)
    with pytest.raises(AuditError) as e:
        read_records(path, kind_of(rel))
    assert str(e.value).startswith(f"{path}:{n}: cut short: {n - 1} complete line(s) of the {n}"), str(e.value)
    result = verify_run(own_run)
    assert [p["path"] for p in result["problems"] if p["category"] == "complete"][:1] == [rel]
    assert result["summary"]["complete"]["damaged"] >= 1


def test_images_cut_short_is_truncation_not_a_smaller_run(own_run, tmp_path, monkeypatch, capsys):
    """Before: 7 of 8 images read as the run (40.0 % instead of 37.5 %) and verify called the lost line an image
    a kill kept from being merged. Now report refuses, verify says cut short, and the repair it gives (the command
    that made the run) makes images.jsonl whole again, byte for byte."""
    from t2i_audit.verify import format_result

    original = (own_run / "images.jsonl").read_bytes()
    _cut_last_line(own_run / "images.jsonl")
    code, out = invoke(["report", str(own_run), "-q"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "images.jsonl:8: cut short: 7 complete line(s) of the 8" in out, out
    said = format_result(verify_run(own_run))
    assert "cut short (truncated): 7 complete line(s) of the 8" in said, said
    assert "the command that continues the run merges them" not in said  # not called unmerged shards
    code, out = invoke(["run", "--config", str(own_run / "run.yaml"), "--out", str(own_run), "-q"], tmp_path,
                       monkeypatch, capsys)
    assert code == 0, out[-2000:]
    assert (own_run / "images.jsonl").read_bytes() == original
    assert verify_run(own_run)["ok"]


def test_an_image_line_twice_is_repaired_by_the_command_the_refusal_gives(own_run, tmp_path, monkeypatch, capsys):
    """The refusal's advice ("rerun the command that made the run") works: its merge reads the repeat and writes
    images.jsonl with one record an image, byte for byte the run's own."""
    original = (own_run / "images.jsonl").read_bytes()
    with open(own_run / "images.jsonl", "ab") as f:
        f.write(original.splitlines(keepends=True)[0])
    code, out = invoke(["report", str(own_run), "-q"], tmp_path, monkeypatch, capsys)
    # a finished file: its grown line count is named first (the repeat itself on a file no stage recorded)
    assert code == 2 and "images.jsonl:10: 9 lines, but its stage wrote 8" in out, out
    assert out.rstrip().endswith("rerun the command that made the run"), out
    code, out = invoke(["run", "--config", str(own_run / "run.yaml"), "--out", str(own_run), "-q"], tmp_path,
                       monkeypatch, capsys)
    assert code == 0, out[-2000:]
    assert (own_run / "images.jsonl").read_bytes() == original and verify_run(own_run)["ok"]
