"""Kandinsky 5 T2I (issue 13): what the generic fidelity tests cannot see.

pipeline_kandinsky_t2i.py ``_encode_prompt_qwen``: the prompt in a chat template, Qwen2.5-VL with NO mask, padded
to the longest prompt, ``hidden_states[-1][:, 40:]`` — padding rows included, and the transformer gets them with no
mask. ``__call__`` snaps any size to ``self.resolutions`` (1024 px for a square) and returns ``.image``.
"""

from __future__ import annotations

import pytest
import torch

from t2i_audit.generate import load_pipeline
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture import pipeline_text as PT
from t2i_audit.probes.capture.denoiser import run_hooked
from t2i_audit.tiny.tokenizers import _KANDINSKY5_TEMPLATE

from .harness import FAMILIES, PROMPTS

KANDINSKY = "tiny-kandinsky5"


@pytest.fixture(scope="module")
def kandinsky():
    torch.set_num_threads(1)
    card = resolve_model(KANDINSKY)
    text_pipe = PT.load_text_pipeline(card.pretrained_path())
    calls, returned = PT.capture_encoder_calls(text_pipe, PROMPTS, card.call)
    return card, text_pipe, {c.encoder: c for c in calls}, returned


def test_tiny_tokenizer_drops_the_same_prefix_as_the_real_one(kandinsky):
    """The template's system prefix is the 40 tokens the pipeline drops (as with Qwen2.5-VL's tokenizer)."""
    _, pipe, calls, _ = kandinsky
    assert pipe.prompt_template == _KANDINSKY5_TEMPLATE
    k = pipe.prompt_template_encode_start_idx
    assert k == FAMILIES[KANDINSKY]["drop_rows"]["text_encoder"] == 40
    assert len(pipe.tokenizer(text=pipe.prompt_template.split("{}")[0])["input_ids"][0]) == k
    call = calls["text_encoder"]
    assert call.seen_texts[0] == pipe.prompt_template.format(PROMPTS[0]) and not call.real[:, :k].any()


def test_the_qwen_processor_pads_right_as_the_pipeline_assumes(kandinsky):
    """_encode_prompt_qwen cuts [:, 40:] of every row and reads cu_seqlens off the mask as each row's leading
    rows: it assumes right padding (so do the authors, ai-forever/Kandinsky-5 kandinsky/models/text_embedders.py
    ``[:, crop_start:]``). The tokenizer component is a Qwen2VLProcessor, whose tokenizer's padding_side decides
    (Qwen2.5-VL-7B-Instruct's: right). The tiny has the same kind: after the cut, each row starts with its prompt."""
    _, pipe, calls, _ = kandinsky
    assert type(pipe.tokenizer).__name__ == "Qwen2VLProcessor" and pipe.tokenizer.tokenizer.padding_side == "right"
    call, k = calls["text_encoder"], pipe.prompt_template_encode_start_idx
    for b, text in enumerate(PROMPTS):
        n = int(call.real[b].sum())
        assert call.real[b, k:k + n].all() and pipe.tokenizer.tokenizer.decode(call.input_ids[b, k:k + n]) == (
            f"{text}<|im_end|>")
    assert call.offsets is not None  # the processor's own tokenizer gives the slot offsets


def test_padding_rows_reach_the_denoiser_unmasked(kandinsky):
    """encode_prompt returns every row after the prefix (padding too, no mask): the conditioning layer there,
    and the real rows (eos / mean pool over) are the prompt's own."""
    card, pipe, calls, (qwen, clip, cu_seqlens) = kandinsky
    call, k = calls["text_encoder"], pipe.prompt_template_encode_start_idx
    info = PT.PipelineTextEncoder(pipe, card.call).describe("text_encoder", call)
    assert (info["conditioning_layer"], info["conditioning"], info["mask_passed"]) == ("h02", "hidden_states[-1]",
                                                                                         False)
    torch.testing.assert_close(PT.layer_tensors(call)["h02"][:, k:], qwen, atol=1e-6, rtol=1e-6)
    n_real = call.real.sum(1)
    assert cu_seqlens.diff().tolist() == n_real.tolist() and n_real[0] < n_real[1]  # prompt 0 is padded
    assert qwen[0, int(n_real[0]):].abs().sum() > 0  # its padding rows are states, not zeros
    info2 = PT.PipelineTextEncoder(pipe, card.call).describe("text_encoder_2", calls["text_encoder_2"])
    assert (info2["conditioning_layer"], info2["pooled_used"]) == ("pooled", True)
    torch.testing.assert_close(PT.layer_tensors(calls["text_encoder_2"])["pooled"], clip)


@pytest.mark.parametrize("size", [32, 64])
def test_any_size_is_snapped_and_the_visual_blocks_are_hooked(size):
    card = resolve_model(KANDINSKY)
    pipe = load_pipeline(card, "cpu", "float32")
    out, info = run_hooked(pipe, ["a red cube"], [0], steps=1, guidance=3.5, size=size, call_kwargs=card.call,
                           at_steps=[0], output_type="np")
    assert info["images"].shape == (1, 256, 256, 3)  # 1024 px latents (128 a side) through the tiny 2x VAE
    assert info["image_positions"] == {"visual00": (1024 // 8 // 2) ** 2}
    assert set(out) == {"visual00__t000-cond", "visual00__t000-uncond"}  # two transformer calls a step
    assert all(v.shape == (1, pipe.transformer.config.model_dim) for v in out.values())
