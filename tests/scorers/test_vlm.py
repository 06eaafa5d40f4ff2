"""VlmJudge on tiny Qwen3-VL / Qwen2.5-VL / InternVL 3 / LLaVA-OneVision (byte-level BPE) and Gemma 3
(SentencePiece-style BPE), each with its checkpoint's chat template: answer-token
logic on the real template, P(yes) against a plain forward of the library's own chat-template
path, a hand-built head whose answer is known, left padding, the shared image encoding,
Soft-TIFA, max_pixels, the moved LLaVA card and the end-to-end stage."""

import hashlib
import json
import math

import pytest
import torch

from t2i_audit.errors import AuditError
from t2i_audit.scorers.chat_templates import GEMMA3, INTERNVL3, LLAVA_ONEVISION, QWEN2_VL, QWEN3_VL
from t2i_audit.scorers.registry import create_scorer, get_card
from t2i_audit.scorers.stage import run_score_stage
from t2i_audit.scorers.vlm import answer_token_ids, soft_tifa

from .scenes import draw, make_run, prompt

SCENE = draw([("square", "red", (4, 20, 24, 40)), ("circle", "blue", (40, 20, 60, 40))])
OTHER = draw([("circle", "green", (10, 10, 50, 50))])
P = prompt("red", "square", "blue", "circle", rel="left of")
QWEN = ["tiny-qwen3-vl", "tiny-qwen2.5-vl"]
VLMS = QWEN + ["tiny-internvl3", "tiny-llava-onevision", "tiny-gemma3"]
# The answer starts a new line after the assistant prefix, so the bare word is its own token and " Yes" is the
# spaced piece: byte-level BPE (Qwen, InternVL 3's and LLaVA-OneVision's Qwen2 tokenizers) writes the space "Ġ",
# Gemma's SentencePiece-style BPE writes it "▁".
BYTE_LEVEL = {"yes": ["Yes", "yes", "ĠYes", "Ġyes"], "no": ["No", "no", "ĠNo", "Ġno"]}
SENTENCEPIECE = {"yes": ["Yes", "yes", "▁Yes", "▁yes"], "no": ["No", "no", "▁No", "▁no"]}
PIECES = {name: SENTENCEPIECE if name == "tiny-gemma3" else BYTE_LEVEL for name in VLMS}
# the assistant prefix's last tokens and the newline piece of each tokenizer kind
PREFIX_END = {name: ["<|im_start|>", "assistant", "Ċ"] for name in VLMS}
PREFIX_END["tiny-gemma3"] = ["<start_of_turn>", "model", "\n"]


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
    if s.templates.get("system"):
        msgs.insert(0, {"role": "system", "content": [{"type": "text", "text": s.templates["system"]}]})
    inp = s.processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True,
                                          return_tensors="pt")
    with torch.no_grad():
        probs = s.model(**inp).logits[0, -1].float().softmax(-1)
    ids = {k: s.tokenizer.convert_tokens_to_ids(v) for k, v in PIECES[s.name].items()}
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
    iv, ov, g3 = judges("tiny-internvl3"), judges("tiny-llava-onevision"), judges("tiny-gemma3")
    assert (iv.processor.chat_template, ov.processor.chat_template, g3.processor.chat_template) == \
        (INTERNVL3, LLAVA_ONEVISION, GEMMA3)
    assert iv.render("Q?") == "<|im_start|>user\n<IMG_CONTEXT>\nQ?<|im_end|>\n<|im_start|>assistant\n"
    assert ov.render("Q?") == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                               "<|im_start|>user\n<image>\nQ?<|im_end|>\n<|im_start|>assistant\n")
    assert g3.render(" Q? ") == "<bos><start_of_turn>user\n<start_of_image>Q?<end_of_turn>\n<start_of_turn>model\n"


@pytest.mark.parametrize("real, tiny", [("internvl3-8b", "tiny-internvl3"), ("gemma-3-12b-it", "tiny-gemma3"),
                                        ("llava-onevision-7b", "tiny-llava-onevision")])
def test_real_cards_match_their_tiny_twins(real, tiny):
    """The tiny model stands in for the real card: same answer words, same system turn, and no max_pixels
    (a Qwen-only budget that VlmJudge refuses for these processors)."""
    r, t = get_card(real), get_card(tiny)
    for key in ("yes_tokens", "no_tokens", "max_pixels"):
        assert r["options"].get(key) == t["options"].get(key)
    assert (r.get("templates") or {}).get("system") == (t.get("templates") or {}).get("system")
    assert r["class"] == t["class"] == "t2i_audit.scorers.vlm:VlmJudge" and r["options"].get("max_pixels") is None


@pytest.mark.parametrize("name", VLMS)
def test_answer_ids_follow_the_assistant_prefix(judges, name):
    """The answer starts a line after the assistant prefix ("assistant\\n", Gemma's "model\\n"), so "Yes" is
    the token Yes and " Yes" is the spaced piece (ĠYes byte-level, ▁Yes SentencePiece-style) — four distinct
    single tokens, as in these models' vocabularies."""
    s = judges(name)
    tok = s.tokenizer
    assert s.yes_ids == tok.convert_tokens_to_ids(PIECES[name]["yes"])
    assert s.no_ids == tok.convert_tokens_to_ids(PIECES[name]["no"])
    assert len(set(s.yes_ids + s.no_ids) - {tok.unk_token_id}) == 8
    ids = s.encode([(SCENE, "Is there a cat?")])["input_ids"][0].tolist()
    assert tok.convert_ids_to_tokens(ids[-3:]) == PREFIX_END[name]
    prefix = s.render("Is there a cat?")
    newline = tok.convert_tokens_to_ids(PREFIX_END[name][-1])
    assert tok(prefix + "Yes", add_special_tokens=False)["input_ids"][-2:] == [newline, s.yes_ids[0]]
    assert tok(prefix + " yes", add_special_tokens=False)["input_ids"][-2:] == [newline, s.yes_ids[3]]


def test_gemma_template_bos_is_not_doubled(judges):
    """Gemma 3's template writes <bos> itself; the tokenizer adds one too unless told not to (as the
    processor's own apply_chat_template does): one <bos> per row, after the left padding."""
    s = judges("tiny-gemma3")
    enc = s.encode([(SCENE, "Is there a cat?"), (OTHER, "Is the big red square to the left of the blue circle?")])
    for row, mask in zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist()):
        real = [t for t, m in zip(row, mask) if m]
        assert real[0] == s.tokenizer.bos_token_id and real.count(s.tokenizer.bos_token_id) == 1


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

@pytest.mark.parametrize("name", VLMS)
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


@pytest.mark.parametrize("name", VLMS + ["vqascore"])
def test_left_padded_batch_equals_one_at_a_time(judges, name, tmp_path):
    s = judges(name) if name != "vqascore" else _tiny_llava_vqascore()
    pairs = [(SCENE, "Is there a cat?"), (OTHER, "Is the big red square to the left of the blue circle? Answer."),
             (SCENE, "Is the square red?"), (SCENE.copy(), "Is there a cat?")]
    batch = s.yes_no(pairs)
    single = [s.yes_no([p])[0] for p in pairs]
    assert flat(batch) == pytest.approx(flat(single), rel=1e-5, abs=1e-9)
    assert batch[0][:2] == pytest.approx(batch[3][:2], rel=1e-6)  # same pixels, same question
    mask = s.encode(pairs)["attention_mask"]
    assert mask[:, -1].all() and not mask[:, 0].all()  # left-padded: every row ends on its own last token
    if name in ("vqascore", "tiny-internvl3"):  # InternVLProcessor pads left whatever the tokenizer says
        return                                  # (processing_internvl.py _defaults: padding_side "left")
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


# images an encoder call sees when 2 distinct images fill 4 rows: shared where the processor output can be cut
# per image (Gemma 3: one pixel_values row an image; LLaVA-OneVision: one [tiles, C, H, W] block an image); InternVL's
# tiles are flat with no per-image count in the processor output, so it falls back to one encoding per row
SHARED_IMAGES = {"tiny-gemma3": 2, "tiny-llava-onevision": 2, "tiny-internvl3": 4}


@pytest.mark.parametrize("name", list(SHARED_IMAGES))
def test_image_encoder_sharing_other_architectures(judges, name):
    s = judges(name)
    seen = []

    def count(module, args, kwargs, output):
        px = kwargs.get("pixel_values", args[0] if args else None)
        seen.append(px.shape[0])

    hook = s.model.model.vision_tower.register_forward_hook(count, with_kwargs=True)
    pairs = [(SCENE, "Is there a cat?"), (SCENE, "Is the square red?"), (OTHER, "Is there a cat?"),
             (SCENE, "Is the circle blue?")]
    try:
        s.yes_no(pairs[:1])
        per_image = seen.pop()
        shared = s.yes_no(pairs, batch_size=4)
        n_shared = list(seen)
        s.card["options"]["share_image_encoding"] = False
        seen.clear()
        plain = s.yes_no(pairs, batch_size=4)
    finally:
        s.card["options"]["share_image_encoding"] = True
        hook.remove()
    assert n_shared == [SHARED_IMAGES[name] * per_image] and seen == [4 * per_image]
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


@pytest.mark.parametrize("name", ["tiny-internvl3", "tiny-gemma3", "tiny-llava-onevision"])
def test_max_pixels_is_refused_by_fixed_tile_processors(judges, name):
    assert judges(name).max_pixels is None  # recorded as null
    with pytest.raises(AuditError, match="max_pixels needs a Qwen-VL-style image processor; .* resizes to a fixed"):
        create_scorer(name, overrides={"options": {"max_pixels": 4096}}).load()


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
    from t2i_audit.tiny.scorers import materialize

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
