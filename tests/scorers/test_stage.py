"""The score stage: resume, compaction of torn/stale records, flagged images, registry, errors."""

import json
import textwrap

import pytest

from t2i_audit.errors import AuditError
from t2i_audit.rundir import RunDir
from t2i_audit.scorers import default_scorers, list_scorers
from t2i_audit.scorers import run_score_stage as api_run_score_stage
from t2i_audit.scorers.base import Answer, QuestionScorer
from t2i_audit.scorers.registry import create_scorer, get_card, load_card_file
from t2i_audit.scorers.stage import run_score_stage

from .scenes import draw, make_run, prompt

IMG = draw([("square", "red", (4, 20, 24, 40))])


class Counting(QuestionScorer):
    """Answers yes to everything and counts the images it was asked about."""

    calls = 0

    def answer(self, items, queries):
        Counting.calls += len(items)
        return [{q["id"]: Answer(1.0, True) for q in qs} for qs in queries]


CARD = {"name": "counting", "class": f"{__name__}:Counting", "model": {"id": "none", "revision": "r1"}}


def scorer(**over):
    return Counting({**CARD, **over})


def lines(rd, name="counting"):
    return [json.loads(x) for x in rd.scores(name).read_text().splitlines()]


@pytest.fixture
def run(tmp_path):
    scenes = [(prompt("red", "square", pid=f"p{i:012d}"), draw([("square", "red", (i, i, i + 20, i + 20))]))
              for i in range(5)]
    return make_run(tmp_path / "run", scenes, flags={3: ["black"]})


def test_records_schema_and_flagged_excluded(run):
    Counting.calls = 0
    counts = run_score_stage(run, [], instances=[scorer()], batch_size=2, progress=False)
    c = counts["counting"]
    assert (c["scored"], c["excluded"], c["passed"], c["images"]) == (4, 1, 4, 5)
    assert Counting.calls == 4  # the flagged image never reaches the model
    recs = lines(run)
    assert all(set(r) >= {"prompt_id", "sample", "image_sha256", "scorer", "scorer_model", "scorer_revision",
                          "kind", "question_id", "metric", "value", "verdict", "failures", "truncated",
                          "extra"} for r in recs)
    flagged = [r for r in recs if r["prompt_id"] == "p000000000003"]
    assert len(flagged) == 3 and all(r["verdict"] is None and r["extra"]["excluded"] == "flag" for r in flagged)
    assert flagged[-1]["extra"]["flags"] == ["black"]
    m = RunDir(run.root).read_manifest()["stages"]["score"]
    assert m["status"] == "done" and m["scorers"]["counting"]["excluded"] == 1
    run_score_stage(run, [], instances=[Counting({**CARD, "name": "other"})], progress=False)
    m = RunDir(run.root).read_manifest()["stages"]["score"]
    assert set(m["scorers"]) == {"counting", "other"}  # a later stage run keeps earlier counts


def test_resume_computes_nothing_new(run):
    run_score_stage(run, [], instances=[scorer()], progress=False)
    before = run.scores("counting").read_bytes()
    Counting.calls = 0
    c = run_score_stage(run, [], instances=[scorer()], progress=False)["counting"]
    assert Counting.calls == 0 and c["scored"] == 0 and c["resumed"] == 5
    assert run.scores("counting").read_bytes() == before


def test_torn_last_image_is_recomputed(run):
    run_score_stage(run, [], instances=[scorer()], progress=False)
    raw = run.scores("counting").read_bytes()
    run.scores("counting").write_bytes(raw[: raw.rstrip(b"\n").rfind(b"\n") + 1 + 40])  # cut the last prompt line
    Counting.calls = 0
    run_score_stage(run, [], instances=[scorer()], progress=False)
    assert Counting.calls == 4  # its whole planned batch (4 unflagged images) is scored again ...
    recs = lines(run)
    assert sum(r["kind"] == "prompt" for r in recs) == 5 and len(recs) == 15  # ... but written once


def test_changed_card_or_image_is_rescored(run):
    run_score_stage(run, [], instances=[scorer()], progress=False, batch_size=2)
    Counting.calls = 0
    run_score_stage(run, [], instances=[scorer(model={"id": "none", "revision": "r2"})], progress=False,
                    batch_size=2)
    assert Counting.calls == 4
    assert {r["scorer_revision"] for r in lines(run)} == {"r2"}
    images = run.read_images()
    images[0]["sha256"] = "0" * 64  # a regenerated image
    run.images.write_text("".join(json.dumps(r) + "\n" for r in images))
    Counting.calls = 0
    run_score_stage(run, [], instances=[scorer(model={"id": "none", "revision": "r2"})], batch_size=2,
                    progress=False)
    assert Counting.calls == 2  # the planned batch of two holding the regenerated image


def test_unknown_scorer_did_you_mean_and_missing_run(tmp_path, run):
    with pytest.raises(AuditError, match=r"unknown scorer 'vqa-blp'.*Did you mean 'vqa-blip'"):
        api_run_score_stage(run, ["vqa-blp"], progress=False)
    with pytest.raises(AuditError, match="run directory not found"):
        run_score_stage(RunDir(tmp_path / "nope"), ["clip"], progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(AuditError, match="not a run directory"):
        run_score_stage(RunDir(tmp_path / "empty"), ["clip"], progress=False)


def test_missing_image_file_is_named(run):
    (run.root / run.read_images()[0]["path"]).unlink()
    with pytest.raises(AuditError, match=r"0\.png: image listed in .*images\.jsonl is missing"):
        run_score_stage(run, [], instances=[scorer()], progress=False)


def test_registry_lists_without_torch_and_defaults():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import sys; from t2i_audit.scorers import list_scorers; "
                          "n=len(list_scorers()); print(n, 'torch' in sys.modules)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) >= 5 and out[1] == "False"
    names = {s["name"]: s for s in list_scorers()}
    assert names["vqa-blip"]["model"] == "Salesforce/blip-vqa-base"
    assert names["clip"]["model"] == "ViT-L-14 (openai)" and names["clip"]["higher_is_better"] is True
    assert default_scorers({"color"}) == ["qwen3-vl-8b"]  # defaults: tests/report/test_deciding.py
    assert default_scorers({"action"}) == ["qwen3-vl-8b"]


def test_local_card_file_resolves_paths(tmp_path, run):
    card = tmp_path / "cards" / "mine.yaml"
    card.parent.mkdir()
    card.write_text(textwrap.dedent("""\
        name: my-judge
        class: CLS
        model: {backend: open_clip, id: my-judge, config: weights/config.json,
                pretrained: weights/model.safetensors, local: true, revision: v1}
        """).replace("CLS", f"{__name__}:Counting"))
    (c,) = load_card_file(card)
    assert c["model"]["config"] == str(tmp_path / "cards" / "weights" / "config.json")
    assert c["model"]["pretrained"] == str(tmp_path / "cards" / "weights" / "model.safetensors")
    assert get_card("clip")["model"]["pretrained"] == "openai"  # a tag is not a path
    s = create_scorer("my-judge", cards={"my-judge": c})
    assert isinstance(s, Counting) and s.model_id == "my-judge/model.safetensors" and s.revision == "v1"
    counts = api_run_score_stage(run, ["my-judge"], extra_cards=[str(card)], progress=False)
    assert counts["my-judge"]["scored"] == 4
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: {}\n")
    with pytest.raises(AuditError, match=r"bad\.yaml: scorer card 'x' has no 'class'"):
        load_card_file(bad)


def test_entry_point_scorer(monkeypatch, run):
    from importlib import metadata

    ep = metadata.EntryPoint(name="ep-judge", value=f"{__name__}:Counting", group="t2i_audit.scorers")
    real = metadata.entry_points
    monkeypatch.setattr(metadata, "entry_points",
                        lambda group=None, **kw: [ep] if group == "t2i_audit.scorers" else real(group=group, **kw))
    assert get_card("ep-judge")["class"] == f"{__name__}:Counting"
    assert run_score_stage(run, ["ep-judge"], progress=False)["ep-judge"]["scored"] == 4


def test_tiny_cards_build_once_and_score(monkeypatch, tmp_path, run):
    monkeypatch.setenv("T2I_AUDIT_TINY_DIR", str(tmp_path / "tiny"))
    c = api_run_score_stage(run, ["tiny-vqa"], progress=False)["tiny-vqa"]
    assert c["scored"] == 4 and c["model"] == "tiny:blip" and c["revision"] == "tiny-random-v1"
    stamp = (tmp_path / "tiny" / "blip-v1" / "model.json").stat().st_mtime_ns
    run2 = make_run(tmp_path / "run2", [(prompt("red", "square"), IMG)])
    assert api_run_score_stage(run2, ["tiny-vqa"], progress=False)["tiny-vqa"]["scored"] == 1
    assert (tmp_path / "tiny" / "blip-v1" / "model.json").stat().st_mtime_ns == stamp  # not rebuilt


def test_model_load_failure_is_an_audit_error(run, tmp_path):
    with pytest.raises(AuditError, match=r"scorer 'vqa-blip'.*cannot load model.*--model vqa-blip=PATH"):
        api_run_score_stage(run, ["vqa-blip"], overrides={"vqa-blip": {"model": {"id": str(tmp_path / "nothing"),
                                                                              "local": True}}}, progress=False)
