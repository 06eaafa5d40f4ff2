"""Family-specific fidelity checks for FLUX.2 [dev], FLUX.2 [klein] and Chroma (issue 13): what the generic
parametrized tests cannot see.

* FLUX.2 (pipeline_flux2.py ``_get_mistral_3_small_prompt_embeds``): a PixtralProcessor's
  ``apply_chat_template(tokenize=True)`` (system message + prompt), Mistral 3 with the mask, hidden_states
  [10, 20, 30] stacked side by side per token -> our layer ``cond``.
* FLUX.2 [klein] (pipeline_flux2_klein.py ``_get_qwen3_prompt_embeds``): Qwen3's chat template rendered as text,
  then the tokenizer called prompt by prompt; hidden_states [9, 18, 27] stacked.
* Chroma (pipeline_chroma.py ``_get_t5_prompt_embeds``): T5 with the mask; the transformer's mask keeps one padding row.
* Both transformers' single blocks return ONE tensor, every caption row then the image tokens: the hooked image
  stream is the image rows only.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from t2i_audit.generate import load_pipeline
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture import pipeline_text as PT
from t2i_audit.probes.capture.denoiser import run_hooked

from .harness import PROMPTS

FLUX2, KLEIN, CHROMA = "tiny-flux2", "tiny-flux2-klein", "tiny-chroma"


@pytest.fixture(scope="module")
def captured():
    torch.set_num_threads(1)
    cache = {}

    def get(name, call=None):
        key = (name, repr(call))
        if key not in cache:
            card = resolve_model(name)
            pipe = PT.load_text_pipeline(card.pretrained_path())
            call = card.call if call is None else call
            calls, returned = PT.capture_encoder_calls(pipe, PROMPTS, call)
            cache[key] = (card, pipe, calls[0], returned, call)
        return cache[key]

    return get


@pytest.mark.parametrize("name, layers", [(FLUX2, [10, 20, 30]), (KLEIN, [9, 18, 27])])
def test_stacked_layers_are_the_pipelines_defaults_and_cond_is_what_encode_prompt_returns(captured, name, layers):
    card, pipe, call, (embeds, _text_ids), _ = captured(name)
    default = inspect.signature(type(pipe).__call__).parameters["text_encoder_out_layers"].default
    assert list(default) == layers == call.stacked
    info = PT.PipelineTextEncoder(pipe, card.call).describe("text_encoder", call)
    assert info["conditioning_layer"] == "cond" and str(layers) in info["conditioning"]
    cond = PT.layer_tensors(call)["cond"]
    width = pipe.text_encoder.config.get_text_config().hidden_size
    assert cond.shape == embeds.shape == (len(PROMPTS), 512, 3 * width)
    torch.testing.assert_close(cond, embeds, atol=0, rtol=0)  # the same numbers, exactly
    # and not one layer: the middle third is hidden_states[20] (FLUX.2) / [18] (klein)
    torch.testing.assert_close(cond[..., width:2 * width], call.output.hidden_states[layers[1]], atol=0, rtol=0)


def test_a_runs_text_encoder_out_layers_moves_the_stacked_layers(captured):
    card, pipe, call, (embeds, _), used = captured(FLUX2, {"text_encoder_out_layers": (1, 2)})
    assert call.stacked == [1, 2]
    info = PT.PipelineTextEncoder(pipe, used).describe("text_encoder", call)
    assert "[1, 2]" in info["conditioning"]
    torch.testing.assert_close(PT.layer_tensors(call)["cond"], embeds, atol=0, rtol=0)


def test_flux2_chat_template_is_recorded_with_its_real_tokens(captured):
    """apply_chat_template(tokenize=True) on the processor is recorded: the text the tokenizer saw is FLUX.2's
    system message + prompt in Mistral's template, and the real tokens are its tokens (not all 512 rows)."""
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

    _, pipe, call, _, _ = captured(FLUX2)
    assert type(pipe.tokenizer).__name__ == "PixtralProcessor"
    assert not any("no tokenizer call" in n for n in call.notes)
    tok = pipe.tokenizer.tokenizer
    for b, prompt in enumerate(PROMPTS):
        assert call.seen_texts[b] == f"<s>[SYSTEM_PROMPT]{SYSTEM_MESSAGE}[/SYSTEM_PROMPT][INST]{prompt}[/INST]"
        n = len(tok(call.seen_texts[b], add_special_tokens=False)["input_ids"])
        assert int(call.real[b].sum()) == n < 512
        assert call.input_ids[b, 0] == tok.bos_token_id and call.input_ids[b, n - 1] == tok.convert_tokens_to_ids(
            "[/INST]") and call.input_ids[b, n] == tok.pad_token_id
    assert call.untruncated_lengths == call.real.sum(1).tolist() and call.mask_passed


@pytest.mark.parametrize("name", [FLUX2, KLEIN])
def test_slot_tokens_are_the_prompts_words(captured, name):
    card, pipe, _, _, _ = captured(name)
    call = PT.capture_encoder_calls(pipe, PROMPTS, card.call, offsets=True)[0][0]
    text = PROMPTS[0]  # "a red cube to the left of a blue sphere"
    spans = {"c1": (text.index("red"), text.index("red") + 3), "c2": (text.index("blue"), text.index("blue") + 4)}
    moved = PT.map_spans(text, call.seen_texts[0], spans)
    slots = PT.token_slots(call.offsets[0], moved, ["c1", "c2"], call.real[0])
    tok = getattr(pipe.tokenizer, "tokenizer", pipe.tokenizer)
    ids = call.input_ids[0].tolist()
    assert {k: tok.decode([ids[i] for i in v]).strip() for k, v in slots.items()} == {"c1": "red", "c2": "blue"}


def test_klein_tokenizes_prompt_by_prompt_in_qwen3s_template(captured):
    """Flux2Klein renders the template as text and calls the tokenizer once per prompt: the rows are found as
    the stacked per-prompt calls, each with its own text and real-token count."""
    _, pipe, call, _, _ = captured(KLEIN)
    assert not any("no tokenizer call" in n for n in call.notes)
    for b, prompt in enumerate(PROMPTS):
        rendered = f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        assert call.seen_texts[b] == rendered
        assert int(call.real[b].sum()) == len(pipe.tokenizer(rendered)["input_ids"]) < 512
    assert call.real[0].sum() != call.real[1].sum()  # each prompt its own mask, not a shared one


def test_chroma_runs_t5_with_the_mask_and_its_transformer_sees_one_padding_row(captured):
    card, pipe, call, returned, _ = captured(CHROMA)
    info = PT.PipelineTextEncoder(pipe, card.call).describe("text_encoder", call)
    assert (info["mask_passed"], info["sequence_length"], info["conditioning_layer"]) == (True, 512, "h02")
    embeds, _text_ids, mask = returned[:3]
    torch.testing.assert_close(PT.layer_tensors(call)["h02"], embeds, atol=0, rtol=0)
    # the pipeline's transformer mask = our real tokens + the first padding token (mask_indices <= seq_lengths)
    n_real = call.real.sum(1)
    assert mask.sum(1).tolist() == (n_real + 1).tolist()
    assert all(mask[b, : n + 1].all() for b, n in enumerate(n_real.tolist()))


@pytest.mark.parametrize("name", [FLUX2, KLEIN, CHROMA])
def test_single_blocks_hook_the_image_rows_of_the_joint_sequence(name):
    """The single blocks return cat([all 512 caption rows, image tokens]) as one tensor: the stored vector is
    the mean over the image rows only (checked against the block's full output, recorded here)."""
    card = resolve_model(name)
    pipe = load_pipeline(card, "cpu", "float32")
    full = []
    h = pipe.transformer.single_transformer_blocks[0].register_forward_hook(lambda _m, _i, o: full.append(o))
    try:
        out, info = run_hooked(pipe, ["a red cube"], [0], steps=1, guidance=1.0, size=32, at_steps=[0])
    finally:
        h.remove()
    tokens = (32 // pipe.vae_scale_factor // 2) ** 2
    assert set(info["image_positions"].values()) == {tokens}
    assert full[0].shape[1] == 512 + tokens
    np.testing.assert_allclose(out["single00__t000-cond"], full[0][:, 512:].mean(1).numpy(), rtol=1e-6, atol=1e-6)
    assert not np.allclose(out["single00__t000-cond"], full[0].mean(1).numpy(), atol=1e-4)


@pytest.mark.parametrize("name, guidance, labels", [(KLEIN, 4.0, {"cond", "uncond"}), (KLEIN, 1.0, {"cond"}),
                                                    (FLUX2, 4.0, {"cond"}), (CHROMA, 4.0, {"cond", "uncond"})])
def test_calls_per_step_are_labelled(name, guidance, labels):
    """Klein (not distilled) and Chroma call the transformer twice a step under guidance (prompt, then negative);
    FLUX.2 [dev] is guidance-distilled: one call, guidance as an embedding."""
    card = resolve_model(name)
    pipe = load_pipeline(card, "cpu", "float32")
    out, _ = run_hooked(pipe, ["a red cube"], [0], steps=1, guidance=guidance, size=32, call_kwargs=card.call,
                        at_steps=[0])
    assert {k.split("-", 1)[1] for k in out} == labels
    if len(labels) == 2:
        assert not np.allclose(out["block00__t000-cond"], out["block00__t000-uncond"])


def test_recording_proxy_records_a_tokenizing_chat_template_as_the_tokenizer_call():
    """A plain tokenizer's apply_chat_template (transformers 5: return_dict defaults to True) is recorded as
    the tokenizer call on the rendered text that gives the same ids; a text-only render records nothing."""
    from t2i_audit.tiny.tokenizers import qwen3_tokenizer

    tok = qwen3_tokenizer()
    proxy = PT._RecordingTokenizer(tok)
    chats = [[{"role": "user", "content": p}] for p in PROMPTS]
    text = proxy.apply_chat_template(chats, tokenize=False, add_generation_prompt=True)
    assert proxy.calls == []
    out = proxy.apply_chat_template(chats, tokenize=True, add_generation_prompt=True, padding="max_length",
                                    max_length=40, return_tensors="pt")
    (seen, _args, kw, res), = proxy.calls
    assert seen == text and res is out and kw["add_special_tokens"] is False
    assert out["input_ids"].tolist() == tok(text, **{k: v for k, v in kw.items() if k != "return_tensors"})["input_ids"]
