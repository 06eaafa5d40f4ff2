"""Family-specific fidelity checks for the LLM-text-encoder families (issue 13): what the generic
parametrized tests in test_text_fidelity.py / test_denoiser_fidelity.py cannot see.

Qwen-Image (pipeline_qwenimage.py ``_get_qwen_prompt_embeds``): the prompt is wrapped in a chat template,
Qwen2.5-VL runs with the mask, ``hidden_states[-1]`` of the real tokens is kept and the template's first
``prompt_template_encode_start_idx`` (34) rows are dropped before the denoiser sees it.
"""

from __future__ import annotations

import pytest
import torch

from t2i_audit.generate import load_pipeline
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture import pipeline_text as PT
from t2i_audit.probes.capture.denoiser import run_hooked
from t2i_audit.tiny.tokenizers import _QWEN_TEMPLATE

from .harness import FAMILIES, PROMPTS

QWEN = "tiny-qwen-image"


@pytest.fixture(scope="module")
def qwen():
    torch.set_num_threads(1)
    card = resolve_model(QWEN)
    text_pipe = PT.load_text_pipeline(card.pretrained_path())
    calls, returned = PT.capture_encoder_calls(text_pipe, PROMPTS, card.call)
    return card, text_pipe, calls[0], returned


def test_tiny_tokenizer_drops_the_same_prefix_as_the_real_one(qwen):
    """The tiny byte-level BPE splits the template's system prefix into exactly the 34 tokens the pipeline
    drops (as Qwen2.5-VL's tokenizer does), so the tiny family drops the template and nothing of the prompt."""
    _, pipe, call, _ = qwen
    assert pipe.prompt_template_encode == _QWEN_TEMPLATE
    k = pipe.prompt_template_encode_start_idx
    assert k == FAMILIES[QWEN]["drop_prefix"]["text_encoder"] == 34
    prefix = pipe.prompt_template_encode.split("{}")[0]
    assert len(pipe.tokenizer(prefix)["input_ids"]) == k
    assert type(pipe.tokenizer).__name__ == "Qwen2Tokenizer"
    # the tokenizer saw the templated text, and the first k ids are the prefix's
    assert call.seen_texts[0] == pipe.prompt_template_encode.format(PROMPTS[0])
    assert call.input_ids[0, :k].tolist() == pipe.tokenizer(prefix)["input_ids"]


def test_real_tokens_are_what_encode_prompt_returns(qwen):
    """``real`` (the rows eos/mean/slot pool over) = the rows of encode_prompt's output, per prompt, and the
    conditioning layer at those rows equals it (zero padding elsewhere)."""
    card, pipe, call, (embeds, mask) = qwen
    k = pipe.prompt_template_encode_start_idx
    assert not call.real[:, :k].any()
    n_real = call.real.sum(1)
    assert embeds.shape[1] == int(n_real.max())
    if mask is not None:
        assert mask.sum(1).tolist() == n_real.tolist()
    enc = PT.PipelineTextEncoder(pipe, card.call)
    info = enc.describe("text_encoder", call)
    assert (info["conditioning_layer"], info["conditioning"]) == ("h02", "hidden_states[-1]")
    states = PT.layer_tensors(call)[info["conditioning_layer"]]
    assert "final" not in PT.layer_tensors(call)  # a causal-LM output: [0] is the logits, not a layer
    for b, n in enumerate(n_real.tolist()):
        torch.testing.assert_close(states[b, k:k + n], embeds[b, :n], atol=1e-6, rtol=1e-6)
        assert not embeds[b, n:].any()
    # truncation is counted on the same rows: nothing here is truncated
    assert call.untruncated_lengths == n_real.tolist()


def test_slot_tokens_sit_inside_the_prompt_not_the_template(qwen):
    card, pipe, call, _ = qwen
    k = pipe.prompt_template_encode_start_idx
    text = PROMPTS[0]  # "a red cube to the left of a blue sphere"
    spans = {"c1": (text.index("red"), text.index("red") + 3), "o2": (text.index("sphere"), len(text))}
    moved = PT.map_spans(text, call.seen_texts[0], spans)
    call = PT.capture_encoder_calls(pipe, PROMPTS, card.call, offsets=True)[0][0]
    slots = PT.token_slots(call.offsets[0], moved, ["c1", "o2"], call.real[0])
    assert set(slots) == {"c1", "o2"} and min(min(v) for v in slots.values()) >= k
    ids = call.input_ids[0].tolist()
    assert pipe.tokenizer.decode([ids[i] for i in slots["c1"]]).strip() == "red"


@pytest.mark.parametrize("size", [32, 64])
def test_qwen_hooked_tensor_is_the_image_stream_and_true_cfg_is_labelled(size):
    """QwenImageTransformerBlock returns (text, image): the hooked tensor has the latent token count
    (VAE /4, then 2x2 packing); true CFG calls the transformer twice a step: cond, then uncond."""
    card = resolve_model(QWEN)
    pipe = load_pipeline(card, "cpu", "float32")
    out, info = run_hooked(pipe, ["a red cube"], [0], steps=1, guidance=1.0, size=size,
                           call_kwargs=card.call, at_steps=[0])
    tokens = (size // pipe.vae_scale_factor // 2) ** 2
    assert set(info["image_positions"].values()) == {tokens}
    assert set(out) == {f"block{i:02d}__t000-{h}" for i in range(2) for h in ("cond", "uncond")}
    width = pipe.transformer.config.num_attention_heads * pipe.transformer.config.attention_head_dim
    assert all(v.shape == (1, width) for v in out.values())


# ---------------------------------------------------------------- Sana (Gemma 2)
# pipeline_sana.py: "\n".join(complex_human_instruction) + prompt, padded to num_chi + max_sequence_length - 2,
# Gemma 2 with the mask, output[0]; encode_prompt keeps select_index = [0] + range(-max_sequence_length + 1, 0).

SANA = "tiny-sana"


@pytest.fixture(scope="module")
def sana():
    torch.set_num_threads(1)
    card = resolve_model(SANA)
    text_pipe = PT.load_text_pipeline(card.pretrained_path())
    calls, returned = PT.capture_encoder_calls(text_pipe, PROMPTS, card.call)
    return card, text_pipe, calls[0], returned


def test_sana_runs_gemma_in_its_own_mode(sana):
    """The instruction prefix is the __call__ default's, the tokenizer pads on the right (the pipeline sets
    padding_side on the tokenizer: it must pass through our recording proxy), and <bos> starts every row."""
    card, pipe, call, (embeds, mask, _neg, _neg_mask) = sana  # encode_prompt returns the negatives too
    import inspect as _inspect

    chi = "\n".join(_inspect.signature(type(pipe).__call__).parameters["complex_human_instruction"].default)
    assert call.seen_texts[0] == chi + PROMPTS[0] and call.seen_texts[1] == chi + PROMPTS[1].lower()
    n_chi = len(pipe.tokenizer.encode(chi))
    assert call.input_ids.shape[1] == n_chi + 300 - 2  # max_length_all, max_sequence_length 300
    assert (call.input_ids[:, 0] == pipe.tokenizer.bos_token_id).all()
    assert pipe.tokenizer.padding_side == "right" and bool(call.real[0, -1]) is False
    assert type(pipe.tokenizer).__name__ == "GemmaTokenizer"
    # real = the rows the denoiser sees with mask 1: <bos>, the instruction's last token, the prompt
    # (on the text the tokenizer saw: _text_preprocessing lower-cases "Three GREEN dogs")
    n_prompt = [len(pipe.tokenizer(t)["input_ids"]) - n_chi for t in call.seen_texts]
    assert call.real.sum(1).tolist() == [2 + n for n in n_prompt] == mask.sum(1).tolist()
    assert embeds.shape[1] == 300
    info = PT.PipelineTextEncoder(pipe, card.call).describe("text_encoder", call)
    assert info["conditioning"] == "last_hidden_state" and info["mask_passed"] is True
    assert call.untruncated_lengths == call.real.sum(1).tolist()  # nothing truncated


def test_sana_slot_tokens_are_the_prompts_words(sana):
    card, pipe, _, _ = sana
    call = PT.capture_encoder_calls(pipe, PROMPTS, card.call, offsets=True)[0][0]
    text = PROMPTS[0]
    spans = {"c2": (text.index("blue"), text.index("blue") + 4)}
    moved = PT.map_spans(text, call.seen_texts[0], spans)
    slots = PT.token_slots(call.offsets[0], moved, ["c2"], call.real[0])
    assert pipe.tokenizer.decode([int(call.input_ids[0, i]) for i in slots["c2"]]).strip() == "blue"


@pytest.mark.parametrize("size", [32, 64])
def test_sana_hooked_tensor_is_the_image_stream(size):
    """SanaTransformerBlock returns the image tokens only (patch 1 over the VAE's latent), CFG batched."""
    card = resolve_model(SANA)
    pipe = load_pipeline(card, "cpu", "float32")
    out, info = run_hooked(pipe, ["a red cube"], [0], steps=1, guidance=4.5, size=size,
                           call_kwargs=card.call, at_steps=[0])
    assert set(info["image_positions"].values()) == {(size // pipe.vae_scale_factor) ** 2}
    assert set(out) == {"block00__t000-cond", "block00__t000-uncond"}


def test_tiny_tokenizers_build_deterministically(qwen, sana):
    """Trained in-process: a second build gives the same vocabulary as the one saved in the tiny folder."""
    from t2i_audit.tiny.tokenizers import gemma_tokenizer, qwen_tokenizer

    assert qwen_tokenizer().get_vocab() == qwen[1].tokenizer.get_vocab()
    assert gemma_tokenizer().get_vocab() == sana[1].tokenizer.get_vocab()
