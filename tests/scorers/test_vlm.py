"""VlmJudge on tiny Qwen3-VL / Qwen2.5-VL (real chat templates, byte-level BPE): answer-token
logic on the real template, P(yes) against a plain forward of the library's own chat-template
path, a hand-built head whose answer is known, left padding, the shared image encoding,
Soft-TIFA, max_pixels, the moved LLaVA card and the end-to-end stage."""

import hashlib
import json
import math

import pytest
import torch

from t2i_audit.errors import AuditError
from t2i_audit.scorers.chat_templates import QWEN2_VL, QWEN3_VL
from t2i_audit.scorers.registry import create_scorer, get_card
from t2i_audit.scorers.stage import run_score_stage
from t2i_audit.scorers.vlm import answer_token_ids, soft_tifa

from .scenes import draw, make_run, prompt

SCENE = draw([("square", "red", (4, 20, 24, 40)), ("circle", "blue", (40, 20, 60, 40))])
OTHER = draw([("circle", "green", (10, 10, 50, 50))])
P = prompt("red", "square", "blue", "circle", rel="left of")
QWEN = ["tiny-qwen3-vl", "tiny-qwen2.5-vl"]
ANSWER_PIECES = {"yes": ["Yes", "yes", "ĠYes", "Ġyes"], "no": ["No", "no", "ĠNo", "Ġno"]}


@pytest.fixture(scope="module")
def judges():
    cache = {}

    def get(name, **options):
        key = (name, json.dumps(options, sort_keys=True))
        if key not in cache:
            cache[key] = create_scorer(name, overrides={"options": options} if options else None).load()
        return cache[key]

    return get


def plain_p(s, image, text):
    """P(yes), P(no) from the library's own one-call path: the processor's apply_chat_template
    (tokenize=True) on messages carrying the PIL image, a plain model(**inputs), full logits."""
    msgs = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]
    inp = s.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True,
                                          return_tensors="pt")
    with torch.no_grad():
        probs = s.model(**inp).logits[0, -1].float().softmax(-1)
    ids = {k: s.tokenizer.convert_tokens_to_ids(v) for k, v in ANSWER_PIECES.items()}
    return probs[ids["yes"]].sum().item(), probs[ids["no"]].sum().item()


def flat(results):
    return [p for py, pn, _ in results for p in (py, pn)]


# --- templates and answer tokens ------------------------------------------------------------------

def test_templates_are_the_checkpoints(judges):
    assert hashlib.sha256(QWEN3_VL.encode()).hexdigest() == \
        "3636d0f0bd6bef02654cdffdc447b79cb2cef8ab02cc75267345946291a489e4"  # Qwen3-VL-8B-Instruct's
    q3, q25 = judges("tiny-qwen3-vl"), judges("tiny-qwen2.5-vl")
    assert q3.processor.chat_template == QWEN3_VL and q25.processor.chat_template == QWEN2_VL
    assert q3.render("Q?") == "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Q?<|im_end|>\n<|im_start|>assistant\n"
    assert q25.render("Q?") == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                                "<|vision_start|><|image_pad|><|vision_end|>Q?<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("name", QWEN)
def test_answer_ids_follow_the_assistant_prefix(judges, name):
    """Byte-level BPE: the answer starts a line after "assistant\\n", so "Yes" is the token Yes
    and " Yes" is ĠYes — four distinct single tokens, as in Qwen's vocabulary."""
    s = judges(name)
    tok = s.tokenizer
    assert s.yes_ids == tok.convert_tokens_to_ids(ANSWER_PIECES["yes"])
    assert s.no_ids == tok.convert_tokens_to_ids(ANSWER_PIECES["no"])
    ids = s.encode([(SCENE, "Is there a cat?")])["input_ids"][0].tolist()
    assert tok.convert_ids_to_tokens(ids[-3:]) == ["<|im_start|>", "assistant", "Ċ"]
    prefix = s.render("Is there a cat?")
    assert tok(prefix + "Yes", add_special_tokens=False)["input_ids"][-2:] == [tok.convert_tokens_to_ids("Ċ"), s.yes_ids[0]]


def test_answer_word_that_splits_raises():
    from transformers import Qwen2Tokenizer
    from tokenizers import pre_tokenizers

    bytes_only = Qwen2Tokenizer(vocab={c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}, merges=[])
    with pytest.raises(AuditError, match=r"model 'org/judge': answer word 'Yes' after the assistant prefix is "
                                         r"3 tokens \['Y', 'e', 's'\], not one token"):
        answer_token_ids(bytes_only, "assistant\n", ["Yes"], "org/judge")


def test_answer_ids_llama_kind_take_the_spaced_word():
    """LLaVA-1.5 (SentencePiece "▁"): after "ASSISTANT:" the answer is " Yes" = ▁Yes; the bare
    "Yes" there is the mid-word piece, a different id."""
    from transformers import LlamaTokenizer

    chars = sorted(set("ASISTANTUSERYesNoyn:?. abcdefghijklmopqrstuvwxz") - {" "}) + ["▁"]
    merges = [("▁", "Y"), ("e", "s"), ("▁Y", "es"), ("Y", "es"), ("▁", "N"), ("▁N", "o"), ("N", "o")]
    vocab = {p: i for i, p in enumerate(dict.fromkeys(["<unk>", "<s>", "</s>"] + chars + ["".join(m) for m in merges]))}
    tok = LlamaTokenizer(vocab=vocab, merges=merges)
    assert answer_token_ids(tok, "USER: Is it? ASSISTANT:", [" Yes", " No"]) == [vocab["▁Yes"], vocab["▁No"]]
    assert answer_token_ids(tok, "USER: Is it? ASSISTANT:", ["Yes"]) == [vocab["Yes"]]


# --- the numbers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", QWEN)
def test_p_yes_is_the_softmax_of_a_plain_forward(judges, name):
    s = judges(name, max_pixels=None)  # the processor's own budget, as the plain path uses
    for image, q in [(SCENE, "Is there a cat? Please answer yes or no."), (OTHER, "Is the circle green?")]:
        py, pn, _ = s.yes_no([(image, q)])[0]
        hy, hn = plain_p(s, image, q)
        assert py == pytest.approx(hy, rel=1e-5, abs=1e-9) and pn == pytest.approx(hn, rel=1e-5, abs=1e-9)


def test_known_answer_from_a_hand_built_head(judges):
    """lm_head = 0 with bias ln(V-1) on "Yes": P(Yes) = 1/2 exactly, every other token 1/(2(V-1))."""
    s = create_scorer("tiny-qwen3-vl").load()
    head = s.model.lm_head
    vocab = head.out_features
    new = torch.nn.Linear(head.in_features, vocab, bias=True)
    with torch.no_grad():
        new.weight.zero_()
        new.bias.zero_()
        new.bias[s.tokenizer.convert_tokens_to_ids("Yes")] = math.log(vocab - 1)
    s.model.lm_head = new
    other = 1 / (2 * (vocab - 1))
    for py, pn, _ in s.yes_no([(SCENE, "Is there a cat?"), (OTHER, "Is the square red? Please answer.")]):
        assert py == pytest.approx(0.5 + 3 * other, abs=1e-6) and pn == pytest.approx(4 * other, abs=1e-7)


@pytest.mark.parametrize("name", QWEN + ["vqascore"])
def test_left_padded_batch_equals_one_at_a_time(judges, name, tmp_path):
    s = judges(name) if name != "vqascore" else _tiny_llava_vqascore()
    pairs = [(SCENE, "Is there a cat?"), (OTHER, "Is the big red square to the left of the blue circle? Answer."),
             (SCENE, "Is the square red?"), (SCENE.copy(), "Is there a cat?")]
    batch = s.yes_no(pairs)
    single = [s.yes_no([p])[0] for p in pairs]
    assert flat(batch) == pytest.approx(flat(single), rel=1e-5, abs=1e-9)
    assert batch[0][:2] == pytest.approx(batch[3][:2], rel=1e-6)  # same pixels, same question
    if name == "vqascore":
        return
    s.tokenizer.padding_side = "right"  # the last position would be padding: the test can fail
    try:
        right = s.yes_no(pairs)
    finally:
        s.tokenizer.padding_side = "left"
    assert flat(right) != pytest.approx(flat(single), rel=1e-5, abs=1e-9)


@pytest.mark.parametrize("name", QWEN)
def test_image_encoder_runs_once_per_distinct_image(judges, name):
    s = judges(name)
    seen = []
    hook = s.model.model.visual.register_forward_hook(lambda m, a, kw: seen.append(kw[0].shape[0]))
    try:
        pairs = [(SCENE, "Is there a cat?"), (SCENE, "Is the square red?"), (OTHER, "Is there a cat?"),
                 (SCENE, "Is the circle blue?")]
        shared = s.yes_no(pairs, batch_size=4)
        n_shared = list(seen)
        s.card["options"]["share_image_encoding"] = False
        seen.clear()
        plain = s.yes_no(pairs, batch_size=4)
    finally:
        s.card["options"]["share_image_encoding"] = True
        hook.remove()
    patches = s.encode([(SCENE, "q")])["pixel_values"].shape[0]
    assert n_shared == [2 * patches] and seen == [4 * patches]  # 2 distinct images vs 4 rows
    assert flat(shared) == pytest.approx(flat(plain), rel=1e-6, abs=1e-9)


def test_soft_tifa_means():
    am, gm = soft_tifa([0.9, 0.4, 0.0])
    assert am == pytest.approx(1.3 / 3) and gm == pytest.approx((0.9 * 0.4 * 1e-12) ** (1 / 3))
    assert soft_tifa([]) == (None, None)


def test_max_pixels_caps_the_image_and_is_recorded(judges):
    capped, free = judges("tiny-qwen3-vl"), judges("tiny-qwen3-vl", max_pixels=None)
    assert capped.max_pixels == 2304 and free.max_pixels == 4096  # card cap vs the processor's own
    assert capped.encode([(SCENE, "q")])["image_grid_thw"].tolist() == [[1, 6, 6]]  # 64 px -> 48 px
    assert free.encode([(SCENE, "q")])["image_grid_thw"].tolist() == [[1, 8, 8]]
    with pytest.raises(AuditError, match="max_pixels needs a Qwen-VL-style image processor"):
        _tiny_llava_vqascore(max_pixels=1000)


# --- records end to end ---------------------------------------------------------------------------

def test_tiny_qwen3_vl_end_to_end(tmp_path):
    rd = make_run(tmp_path / "run", [(P, SCENE), (P, OTHER), (P, SCENE)], flags={2: ["black"]})
    counts = run_score_stage(rd, ["tiny-qwen3-vl"], batch_size=2, progress=False)
    assert counts["tiny-qwen3-vl"]["scored"] == 2 and counts["tiny-qwen3-vl"]["excluded"] == 1
    recs = [json.loads(x) for x in rd.scores("tiny-qwen3-vl").read_text().splitlines()]
    assert all(r["extra"]["max_pixels"] == 2304 and r["scorer_revision"] == "tiny-random-v1" for r in recs)
    s = create_scorer("tiny-qwen3-vl").load()
    for sample, image in [(0, SCENE), (1, OTHER)]:
        mine = [r for r in recs if r["sample"] == sample]
        qs = [r for r in mine if r["kind"] == "question"]
        met = {r["metric"]: r for r in mine if r["kind"] == "metric"}
        assert [r["kind"] for r in mine] == ["question"] * 5 + ["metric"] * 3 + ["prompt"]
        p_atoms = [r["extra"]["p_yes"] for r in qs]
        assert met["soft_tifa_am"]["value"] == pytest.approx(sum(p_atoms) / 5)
        assert met["soft_tifa_gm"]["value"] == pytest.approx(math.exp(sum(map(math.log, p_atoms)) / 5))
        assert all(r["value"] == pytest.approx(r["extra"]["p_yes"] / (r["extra"]["p_yes"] + r["extra"]["p_no"])) for r in qs)
        text = 'Does this figure show "{}"? Please answer yes or no.'.format(P["text"])
        assert met["vqascore"]["value"] == pytest.approx(s.yes_no([(image, text)])[0][0], abs=1e-6)
        q0 = qs[0]
        assert q0["value"] == pytest.approx(s.yes_no([(image, q0["extra"]["text"] + " Please answer yes or no.")])[0][0]
                                            / (q0["extra"]["p_yes"] + q0["extra"]["p_no"]), abs=1e-5)
    flagged = [r for r in recs if r["sample"] == 2]
    assert flagged[-1]["extra"]["excluded"] == "flag"


def _tiny_llava_vqascore(**options):
    from t2i_audit.scorers.tiny import materialize

    over = {"model": materialize("llava")}
    if options:
        over["options"] = options
    return create_scorer("vqascore", overrides=over).load()


def test_vqascore_card_moved_onto_vlm_judge():
    card = get_card("vqascore")
    assert card["class"] == "t2i_audit.scorers.vlm:VlmJudge" and card["_file"].endswith("vlm.yaml")
    s = _tiny_llava_vqascore()
    # the strings the old VlmYesScorer built from its templates
    assert s.render(s.question_text("Is there a cat?")) == "USER: <image>\nIs there a cat? Please answer yes or no. ASSISTANT:"
    assert s.render(s.prompt_text("a cat")) == 'USER: <image>\nDoes this figure show "a cat"? Please answer yes or no. ASSISTANT:'
    assert s.yes_ids == [s.tokenizer.convert_tokens_to_ids("yes")]


def test_scorers_command_shows_known_agreement():
    import typer
    from typer.testing import CliRunner

    from t2i_audit.scorers.cli import register

    app = typer.Typer()
    register(app)
    out = CliRunner().invoke(app, ["scorers"]).output
    block = out[out.index("qwen3-vl-8b "):].split("\n")[:3]
    assert block[2].strip().startswith("known agreement: not checked here: GenEval 2")
    assert "arXiv 2512.16853" in block[2]
    rows = json.loads(CliRunner().invoke(app, ["scorers", "--json"]).output)
    assert {r["name"]: r["known_agreement"] for r in rows}["internvl3-8b"]["figure"] == "not published"
