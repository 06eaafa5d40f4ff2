"""VQA scorers: injected P(yes) through the decision layer; tiny BLIP-VQA and LLaVA end to end."""

import json

import pytest

from t2i_audit.scorers.registry import get_card
from t2i_audit.scorers.stage import run_score_stage
from t2i_audit.scorers.vqa import BlipVqaScorer

from . import tiny_models as tm
from .scenes import draw, make_run, prompt

SCENE = draw([("square", "red", (4, 20, 24, 40)), ("circle", "blue", (40, 20, 60, 40))])
P = prompt("red", "square", "blue", "circle", rel="left of")


class InjectedVqa(BlipVqaScorer):
    answers: dict = {}

    def load_model(self):
        pass

    def yes_no(self, pairs):
        out = []
        for im, text in pairs:
            assert im.size == (64, 64)  # the decoded image reaches the decision layer
            py = self.answers.get(text, 0.9)
            out.append((py * 0.8, (1 - py) * 0.8, False))
        return out


def score(tmp_path, answers, p=P, **thr):
    s = InjectedVqa(get_card("vqa-blip", overrides={"thresholds": thr} if thr else None))
    s.answers = answers
    rd = make_run(tmp_path / "run", [(p, SCENE)])
    run_score_stage(rd, [], instances=[s.load()], progress=False)
    recs = [json.loads(x) for x in rd.scores("vqa-blip").read_text().splitlines()]
    return {r["question_id"]: r for r in recs if r["kind"] == "question"}, recs[-1]


def test_all_yes(tmp_path):
    q, pr = score(tmp_path, {})
    assert q["q1"]["value"] == pytest.approx(0.9) and q["q1"]["extra"]["p_yes"] == pytest.approx(0.72)
    assert pr["verdict"] is True and pr["value"] == 1.0


def test_missing_object_dependants_null(tmp_path):
    q, pr = score(tmp_path, {"Is there a circle?": 0.1})
    assert q["q2"]["verdict"] is False
    assert q["q3"]["verdict"] is None and q["q3"]["extra"]["skipped_by"] == ["q2"]
    assert q["q4"]["verdict"] is None
    assert [(f["type"], f["slot"]) for f in pr["failures"]] == [("missing_object", "o2")]
    assert pr["verdict"] is False


def test_swapped_binding_from_probes(tmp_path):
    q, pr = score(tmp_path, {"Is the square red?": 0.2, "Is the circle blue?": 0.3,
                             "Is the square blue?": 0.8, "Is the circle red?": 0.7})
    assert q["q1"]["extra"]["probes"]["q1~o2"]["answer"] is True
    assert sorted((f["type"], f["slot"]) for f in pr["failures"]) == [
        ("swapped_binding", "c1"), ("swapped_binding", "c2")]


def test_threshold_and_reversed_relation(tmp_path):
    ans = {"Is the square to the left of the circle?": 0.55, "Is the circle to the left of the square?": 0.9}
    q, pr = score(tmp_path, ans, p_yes=0.6)
    assert q["q4"]["verdict"] is False and q["q4"]["extra"]["threshold"] == 0.6
    assert pr["failures"][0]["type"] == "reversed_relation"
    q, pr = score(tmp_path / "b", ans, p_yes=0.5)
    assert q["q4"]["verdict"] is True and pr["verdict"] is True


@pytest.mark.parametrize("name", ["vqa-blip", "vqascore"])
def test_tiny_models_end_to_end(tmp_path, model_dir, name):
    folder = model_dir / name
    if not (folder / "done").exists():
        m = tm.blip_vqa_model(folder) if name == "vqa-blip" else tm.llava_model(folder)
        (folder / "done").write_text(json.dumps(m))
    m = json.loads((folder / "done").read_text())
    rd = make_run(tmp_path / "run", [(P, SCENE), (P, SCENE)])
    counts = run_score_stage(rd, [name], overrides={name: {"model": m}}, batch_size=2, progress=False)
    recs = [json.loads(x) for x in rd.scores(name).read_text().splitlines()]
    qs = [r for r in recs if r["kind"] == "question"]
    assert len(qs) == 2 * len(P["questions"])
    assert all(0 <= r["value"] <= 1 and 0 < r["extra"]["p_yes"] < 1 for r in qs)
    a, b = qs[: len(P["questions"])], qs[len(P["questions"]):]  # same image twice: same answers
    assert [r["value"] for r in a] == pytest.approx([r["value"] for r in b], abs=1e-5)
    if name == "vqascore":
        vs = [r for r in recs if r["metric"] == "vqascore"]
        assert len(vs) == 2 and 0 < vs[0]["value"] < 1
    assert counts[name]["scored"] == 2
