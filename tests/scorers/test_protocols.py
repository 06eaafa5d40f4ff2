"""Judge protocols as data: geneval2 and vqascore recomputed with the upstream code's own formula on a tiny
Qwen3-VL whose head we built (so the answer words carry real mass), records that name their protocol, cards that
may not reword a protocol, and chat templates that open a reasoning block.

Upstream formulas, transcribed:
* GenEval 2 — facebookresearch/GenEval2 evaluation.py @ a6e82d2289e8d418f27f0adee77908b07060eea3
  (send_message_with_image, vqa_score, soft_tifa, main's mean / scipy gmean);
* VQAScore — linzhiqiu/t2v_metrics t2v_metrics/models/vqascore_models/qwen3vl_model.py
  @ 6ecb74f92028f42c7e64546d3a71e98c8c73068f (Qwen3VLModel.forward, one answer token). Its images go through
  qwen_vl_utils there; here through the processor (qwen_vl_utils is not installed), as our judge does.
"""

import json
import math

import pytest
import torch
from scipy.stats import gmean

from t2i_audit.errors import AuditError
from t2i_audit.scorers import protocols
from t2i_audit.scorers.base import ScoreItem
from t2i_audit.scorers.registry import create_scorer
from t2i_audit.scorers.stage import run_score_stage
from t2i_audit.scorers.vlm import generation_kwargs

from .scenes import draw, make_run, prompt

SCENE = draw([("square", "red", (4, 20, 24, 40)), ("circle", "blue", (40, 20, 60, 40))])
OTHER = draw([("circle", "green", (10, 10, 50, 50))])
P = prompt("red", "square", "blue", "circle", rel="left of")
P3 = prompt("red", "square", n1=2, pid="p-count")


def judge(protocol, **options):
    """tiny-qwen3-vl under ``protocol`` at the processor's own image budget (as both upstream scripts run),
    its lm_head rebuilt: the random weights (so answers depend on image and text) plus a bias that puts real
    probability on the answer words and number words."""
    s = create_scorer("tiny-qwen3-vl", overrides={"protocol": protocol, "options": {"max_pixels": None, **options}}).load()
    old = s.model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    boost = {"Yes": 4.0, "yes": 2.5, "Ġyes": 1.5, "ĠYes": 1.0, "No": 3.0, "no": 2.0, "two": 2.0, "Two": 1.0, "2": 1.5}
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.zero_()
        for tok, b in boost.items():
            i = s.tokenizer.convert_tokens_to_ids(tok)
            if i is not None and i != s.tokenizer.unk_token_id:
                head.bias[i] = b
    s.model.lm_head = head
    return s


def upstream_probs(s, text, image):
    """GenEval 2's send_message_with_image up to the softmax (t2v_metrics' forward does the same steps)."""
    messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]
    inputs = s.processor.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                             return_dict=True, return_tensors="pt")
    outputs = s.model.generate(**inputs, max_new_tokens=1, do_sample=False, output_scores=True,
                               return_dict_in_generate=True)
    return torch.nn.functional.softmax(outputs.scores[0], dim=-1)


def geneval2_prob(s, text, image, answer_list):
    probs = upstream_probs(s, text, image)
    lm_prob = 0
    for answer in answer_list:
        ans_token_id = s.processor.tokenizer.encode(answer)[0]
        lm_prob += probs[0, ans_token_id].item()
    return lm_prob


def geneval2_soft_tifa(s, vqa_list, image):
    score_list = []
    for question, answer in vqa_list:
        if question.startswith("How many"):
            answer_list = [answer, answer.capitalize(), ' ' + answer, ' ' + answer.capitalize(),
                           protocols.count_answers(answer)[4], ' ' + protocols.count_answers(answer)[4]]
        else:
            answer_list = ['Yes', 'yes', ' yes', ' Yes']
        score_list.append(geneval2_prob(s, '{} Answer in one word.'.format(question), image, answer_list))
    return score_list


def items_of(pairs):
    return [ScoreItem(prompt=p, image_record={"prompt_id": p["id"], "sample": i, "sha256": "x"}, image=im)
            for i, (p, im) in enumerate(pairs)]


def metrics(recs):
    return {r["metric"]: r for r in recs if r["kind"] == "metric"}


def test_geneval2_is_upstream_formula():
    s = judge("geneval2")
    with_list = dict(P, id="p-list", vqa_list=[["How many squares are in the image?", "one"],
                                               ["Is the square red?", "Yes"],
                                               ["Are there any squares in the image?", "Yes"],
                                               ["Are the square to the left of the circle?", "Yes"]])
    pairs = [(P, SCENE), (P3, OTHER), (with_list, SCENE)]
    out = s.score(items_of(pairs))
    for (p, image), recs in zip(pairs, out):
        met = metrics(recs)
        assert list(met) == ["vqascore", "soft_tifa_am", "soft_tifa_gm"]
        up_vqa = geneval2_prob(s, 'Does this image show "{}"? Answer the question with Yes or No.'.format(p["text"]),
                               image, ['Yes', 'yes', ' yes', ' Yes'])
        vqa_list = p.get("vqa_list") or [[a["text"], "Yes" if a["answers"] is None else a["answers"][0]]
                                         for a in protocols.geneval2_atoms(p)]
        scores = geneval2_soft_tifa(s, vqa_list, image)
        assert met["vqascore"]["value"] == pytest.approx(up_vqa, rel=1e-5)
        assert met["soft_tifa_am"]["value"] == pytest.approx(sum(scores) / len(scores), rel=1e-5)
        assert met["soft_tifa_gm"]["value"] == pytest.approx(gmean(scores), rel=1e-5)
        assert met["soft_tifa_am"]["extra"]["atoms"] == len(vqa_list)
        assert all(r["extra"]["protocol"] == "geneval2" for r in recs)
        assert up_vqa > 0.05  # the built head puts real mass on the answer words: not a 1/V comparison
    # a count question is asked GenEval 2's way and read as P(number words)
    count = next(r for r in out[1] if r["kind"] == "question" and r["extra"]["kind"] == "count")
    assert count["extra"]["asked"] == "How many squares are in the image? Answer in one word."
    up = geneval2_prob(s, "How many squares are in the image? Answer in one word.", OTHER,
                       ["two", "Two", " two", " Two", "2", " 2"])
    assert count["value"] == pytest.approx(up, rel=1e-5) and count["extra"]["p_no"] is None


def test_vqascore_is_t2v_metrics_formula():
    s = judge("vqascore")
    pairs = [(P, SCENE), (P3, OTHER)]
    out = s.score(items_of(pairs))
    for (p, image), recs in zip(pairs, out):
        met = metrics(recs)
        assert list(met) == ["vqascore"]
        probs = upstream_probs(s, 'Does this figure show "{}"? Please answer Yes or No.'.format(p["text"]), image)
        answer_token_ids = s.processor.tokenizer.encode('Yes', add_special_tokens=False)
        assert len(answer_token_ids) == 1  # geometric mean over one token = that token's probability
        assert met["vqascore"]["value"] == pytest.approx(probs[0, answer_token_ids[0]].item(), rel=1e-5)
        assert met["vqascore"]["value"] > 0.05


def test_default_protocol_is_ours_and_named_in_records(tmp_path):
    rd = make_run(tmp_path / "run", [(P, SCENE)])
    run_score_stage(rd, ["tiny-qwen3-vl"], batch_size=2, progress=False,
                    overrides={"tiny-qwen3-vl": {"protocol": "vqascore"}})
    run_score_stage(rd, ["tiny-qwen2.5-vl"], batch_size=2, progress=False)
    q3 = [json.loads(x) for x in rd.scores("tiny-qwen3-vl").read_text().splitlines()]
    q25 = [json.loads(x) for x in rd.scores("tiny-qwen2.5-vl").read_text().splitlines()]
    assert {r["extra"]["protocol"] for r in q3} == {"vqascore"}
    assert {r["extra"]["protocol"] for r in q25} == {"t2i-audit"}
    assert protocols.run_protocols(rd.scores_dir) == {"tiny-qwen3-vl": {"vqascore"}, "tiny-qwen2.5-vl": {"t2i-audit"}}
    assert len({r["extra"]["protocol_hash"] for r in q3 + q25}) == 2


def test_protocol_changes_the_fingerprint_and_owns_the_wording():
    a = create_scorer("tiny-qwen3-vl")
    b = create_scorer("tiny-qwen3-vl", overrides={"protocol": "geneval2"})
    assert a.fingerprint != b.fingerprint
    assert b.question_text("Is it red?") == "Is it red? Answer in one word."
    assert a.prompt_text("a cat") == 'Does this figure show "a cat"? Please answer yes or no.'
    reworded = create_scorer("tiny-qwen3-vl", overrides={"protocol": "geneval2",
                                                          "templates": {"question": "{question} Please answer yes or no."}})
    with pytest.raises(AuditError, match="templates.question .* is not protocol 'geneval2'"):
        reworded.load()
    with pytest.raises(AuditError, match="'tifa' is described, not implemented"):
        create_scorer("tiny-qwen3-vl", overrides={"protocol": "tifa"}).protocol
    with pytest.raises(AuditError, match="unknown judge protocol 'geneval-2'.*Did you mean 'geneval2'"):
        create_scorer("tiny-qwen3-vl", overrides={"protocol": "geneval-2"}).protocol


def test_geneval2_atoms_follow_its_data():
    """GenEval 2's forms (geneval2_data.jsonl: "How many backpacks are in the image?" -> "one", "Is the backpack
    green?", "Are there any backpacks in the image?") over our objects, and its number variants."""
    atoms = protocols.geneval2_atoms(P3)
    assert [a["text"] for a in atoms] == ["How many squares are in the image?", "Is the square red?",
                                          "Are there any squares in the image?"]
    assert atoms[0]["answers"] == ["two", "Two", " two", " Two", "2", " 2"]
    assert protocols.count_answers("eleven")[4:] == ["other", " other"]  # return_numeric_string past ten
    assert protocols.soft_tifa([0.5, 0.0], None) == (0.25, 0.0)  # scipy gmean: a zero atom zeroes it
    assert protocols.soft_tifa([0.5, 0.0])[1] == pytest.approx(math.sqrt(0.5e-12))  # ours floors at 1e-12


# --- reasoning templates ----------------------------------------------------------------------------------------
ALWAYS_THINK = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}"
                "{% else %}{% for c in m.content %}{% if c.type == 'text' %}{{ c.text }}{% endif %}{% endfor %}"
                "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")
# Qwen3's switch (its template: enable_thinking false writes an empty, closed block)
SWITCH = ALWAYS_THINK.replace("<think>\n{% endif %}", "{% if enable_thinking is defined and enable_thinking is false %}"
                              "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}")


def _tokenizer(template):
    from t2i_audit.tiny.scorers import qwen_tokenizer

    tok = qwen_tokenizer()
    tok.chat_template = template
    return tok


def test_reasoning_template_refused_or_switched_off():
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Q?"}]}]

    def render_with(tok):
        return lambda **kw: tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False, **kw)

    with pytest.raises(AuditError, match="opens a reasoning block .* cannot be rendered with thinking disabled"):
        generation_kwargs(render_with(_tokenizer(ALWAYS_THINK)), "org/thinker")
    assert generation_kwargs(render_with(_tokenizer(SWITCH)), "org/qwen3") == {"enable_thinking": False}
    assert generation_kwargs(render_with(_tokenizer(ALWAYS_THINK.replace("<think>\n", ""))), "org/plain") == {}


@pytest.mark.parametrize("template, ok", [(ALWAYS_THINK, False), (SWITCH, True)])
def test_judge_load_checks_the_reasoning_template(monkeypatch, template, ok):
    import t2i_audit.extras as extras

    real = extras.auto_processor

    def patched(*a, **kw):
        proc = real(*a, **kw)
        proc.chat_template = template.replace("{% if c.type == 'text' %}",
                                              "{% if c.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
                                              "{% elif c.type == 'text' %}")
        return proc

    monkeypatch.setattr(extras, "auto_processor", patched)
    s = create_scorer("tiny-qwen3-vl")
    if not ok:
        with pytest.raises(AuditError, match="reasoning block"):
            s.load()
        return
    s.load()
    assert s.render("Q?").endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    (py, pn, _), = s.yes_no([(SCENE, "Is there a cat?")])
    assert 0 < py < 1 and 0 < pn < 1
