"""Score-stage drills: a 1,500-question DPG dependency chain is judged (no recursion); an image a
scorer fails on fails the stage by name; a damaged score file resumed gives the bytes of a whole run,
even for a scorer whose values depend on the batch-mates."""

import json
import shutil

import numpy as np
import pytest

from t2i_audit.errors import AuditError
from t2i_audit.rundir import RunDir
from t2i_audit.scorers import verdicts
from t2i_audit.scorers.base import Answer, QuestionScorer
from t2i_audit.scorers.stage import run_score_stage
from tests.scorers.scenes import draw, make_run, prompt


def chain(n: int) -> dict:
    """A DPG-style prompt of n questions, each depending on the next (q1 → q2 → … → qn), listed first
    to last: judging q1 walks the whole chain (recursion stopped at ~1,000 with RecursionError)."""
    qs = [{"id": f"q{i}", "kind": "prompt", "text": f"question {i}?", "depends_on": [f"q{i + 1}"] if i < n else []}
          for i in range(1, n + 1)]
    return {**prompt("red", "square", pid="pchain"), "questions": qs}


def test_deep_dependency_chain_is_judged():
    p = chain(1500)
    ok = verdicts.judge(p, {q["id"]: True for q in p["questions"]})
    assert ok["verdict"] is True and all(s["verdict"] is True for s in ok["questions"].values())
    last_fails = verdicts.judge(p, {**{q["id"]: True for q in p["questions"]}, "q1500": False})
    assert last_fails["verdict"] is False
    assert last_fails["questions"]["q1"] == {"verdict": None, "answer": True, "skipped_by": ["q2"]}
    assert [f["question_id"] for f in last_fails["failures"]] == ["q1500"]  # the rest skipped, not failed


class Yes(QuestionScorer):
    def answer(self, items, queries):
        return [{q["id"]: Answer(1.0, True) for q in qs} for qs in queries]


class FailsOnOne(Yes):
    """Raises on the batch holding prompt ``pbad``: a model error, or judge() on a hostile prompt."""

    def answer(self, items, queries):
        if any(it.key[0] == "pbad" for it in items):
            raise RecursionError("maximum recursion depth exceeded")
        return super().answer(items, queries)


class BatchMean(QuestionScorer):
    """Values that depend on the batch-mates (as float kernels do, in the last bits): the image's
    red mean plus a small share of the batch's mean."""

    def answer(self, items, queries):
        means = [float(np.asarray(it.image)[..., 0].mean()) for it in items]
        batch = sum(means) / len(means)
        return [{q["id"]: Answer(m / 255 + batch * 1e-7, m > 100) for q in qs} for m, qs in zip(means, queries)]


def card(cls, name):
    return {"name": name, "class": f"{__name__}:{cls.__name__}", "model": {"id": "none", "revision": "r1"}}


def scenes(n=6):
    return [(prompt("red", "square", pid=f"p{i}"), draw([("square", "red", (i, i, i + 9 * i, i + 20))]))
            for i in range(n)]


@pytest.fixture
def run(tmp_path):
    with_chain = scenes()
    with_chain.insert(3, (chain(1500) | {"id": "pbad"}, draw([("square", "blue", (2, 2, 30, 30))])))
    return make_run(tmp_path / "run", with_chain, flags={4: ["black"]})  # p3


def test_deep_chain_image_is_scored_in_a_run(run):
    counts = run_score_stage(run, [], instances=[Yes(card(Yes, "yes"))], batch_size=2, progress=False)
    assert counts["yes"]["scored"] == 6 and "error" not in counts["yes"]
    bad = [json.loads(x) for x in run.scores("yes").read_text().splitlines() if '"pbad"' in x]
    assert len(bad) == 1501 and bad[-1]["kind"] == "prompt" and bad[-1]["verdict"] is True


def test_image_a_scorer_fails_on_fails_the_stage_by_name(run):
    with pytest.raises(AuditError, match=r"scorer failing failed on .*pbad sample 0.*RecursionError.*rerun"):
        run_score_stage(run, [], instances=[Yes(card(Yes, "yes")), FailsOnOne(card(FailsOnOne, "failing"))],
                        batch_size=2, progress=False)
    stage = run.read_manifest()["stages"]["score"]
    assert stage["status"] == "done_with_errors" and "RecursionError" in stage["errors"]["failing"]
    assert stage["scorers"]["failing"]["failed_images"] == ["p2 sample 0", "pbad sample 0"]
    assert stage["scorers"]["yes"]["scored"] == 6  # the other scorer finished


def test_resume_after_damage_rescores_whole_planned_batches(tmp_path):
    """Old code rescored the lost image alone, among other batch-mates: other values, other bytes."""
    run = make_run(tmp_path / "run", scenes(7), flags={3: ["black"]})
    mean = BatchMean(card(BatchMean, "mean"))
    run_score_stage(run, [], instances=[mean], batch_size=3, progress=False)  # [p0 p1 p2] [p3 p4 p5] [p6]
    good = run.scores("mean").read_bytes()
    damaged = RunDir(shutil.copytree(run.root, tmp_path / "damaged"))
    keep = [x for x in good.decode().splitlines(keepends=True) if '"p4"' not in x]  # one image lost, mid-batch
    damaged.scores("mean").write_text("".join(keep[:-1]) + keep[-1][:30])  # and the last line torn
    run_score_stage(damaged, [], instances=[mean], batch_size=3, progress=False)
    assert damaged.scores("mean").read_bytes() == good


def test_resume_keeps_the_recorded_score_batch_size(tmp_path, capsys):
    """Old code scored a resume in the batches asked now (`score` defaults to 16, `run` uses the
    config's) and recorded none: other batch-mates, other bytes, nothing said."""
    run = make_run(tmp_path / "run", scenes(7))
    mean = BatchMean(card(BatchMean, "mean"))
    run_score_stage(run, [], instances=[mean], batch_size=3, progress=False)
    good = run.scores("mean").read_bytes()
    stage = run.read_manifest()["stages"]["score"]
    assert stage["planned_batch_size"] == 3 and stage["plan_note"] is None
    keep = [x for x in good.decode().split("\n") if x and '"p4"' not in x]
    run.scores("mean").write_text("\n".join(keep) + "\n")  # one image lost, mid-batch
    capsys.readouterr()
    run_score_stage(run, [], instances=[mean], batch_size=16, progress=False)  # e.g. `score` without -b
    assert run.scores("mean").read_bytes() == good
    stage = run.read_manifest()["stages"]["score"]
    assert stage["planned_batch_size"] == 3 and "batch size 16 asked, 3 kept" in stage["plan_note"]
    assert "batch size 16 asked, 3 kept" in capsys.readouterr().err
    run_score_stage(run, [], instances=[mean], progress=False)  # none asked: the recorded one, no note
    assert run.read_manifest()["stages"]["score"]["plan_note"] is None


def test_score_command_keeps_the_recorded_batch_size(tmp_path, monkeypatch, capsys):
    """`t2i-audit score RUN --batch-size 5` on a run scored in batches of 2 (as `run` records its config's)."""
    from tests.drills.test_malformed_corpus import _invoke

    run = make_run(tmp_path / "run", scenes(3))
    run.update_stage("score", planned_batch_size=2)
    (tmp_path / "cards").mkdir()
    (tmp_path / "cards" / "yes.yaml").write_text(json.dumps(card(Yes, "yes")))
    code, err = _invoke(["score", str(run.root), "--scorer", "yes", "--card", str(tmp_path / "cards" / "yes.yaml"),
                         "--device", "cpu", "--batch-size", "5", "--no-progress"], tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    assert "batch size 5 asked, 2 kept" in err
    assert run.read_manifest()["stages"]["score"]["planned_batch_size"] == 2
