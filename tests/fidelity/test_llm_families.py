"""Family-specific fidelity checks for Z-Image, Lumina 2 and CogView4 (issue 13) that the generic parametrized
tests cannot see: what the tokenizer was given, which rows are real, and which rows of a single-stream DiT's joint
caption+image sequence are the image stream — each pinned to the library's own computation on the tiny components.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t2i_audit.generate import load_pipeline
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture import pipeline_text as PT
from t2i_audit.probes.capture.denoiser import run_hooked

from .harness import PROMPTS


@pytest.fixture(scope="module")
def captured():
    torch.set_num_threads(1)
    cache = {}

    def get(name):
        if name not in cache:
            card = resolve_model(name)
            pipe = PT.load_text_pipeline(card.pretrained_path())
            calls, returned = PT.capture_encoder_calls(pipe, PROMPTS, card.call)
            cache[name] = (card, pipe, calls[0], returned)
        return cache[name]

    return get


def _conditioning(card, pipe, call):
    info = PT.PipelineTextEncoder(pipe, card.call).describe("text_encoder", call)
    return info, PT.layer_tensors(call)[info["conditioning_layer"]]


def _slot(call, text, word):
    spans = {"w": (text.index(word), text.index(word) + len(word))}
    return PT.token_slots(call.offsets[0], PT.map_spans(text, call.seen_texts[0], spans), ["w"], call.real[0])["w"]


def test_cogview4_pipeline_left_padding_is_not_real(captured):
    """_get_glm_embeds: tokenizer(padding="longest") pads left, then the pipeline prepends pad ids up to a multiple
    of 16 and runs GLM WITHOUT a mask: every row goes to the DiT, only the tokenizer's real rows are pooled."""
    card, pipe, call, (embeds, _neg) = captured("tiny-cogview4")
    tok = pipe.tokenizer(PROMPTS, padding="longest")
    extra = call.input_ids.shape[1] - len(tok["input_ids"][0])
    assert call.input_ids.shape[1] % 16 == 0 and extra > 0 and not call.mask_passed
    assert call.real.sum(1).tolist() == [sum(m) for m in tok["attention_mask"]]
    assert not call.real[:, :extra].any() and call.real[:, -1].all()  # left padding: the last row is real
    longest = int(call.real.sum(1).argmax())
    first = int(call.real[longest].long().argmax())
    assert pipe.tokenizer.convert_ids_to_tokens(call.input_ids[longest, first:first + 2].tolist()) == ["[gMASK]",
                                                                                                      "<sop>"]
    info, states = _conditioning(card, pipe, call)
    assert (info["conditioning_layer"], info["conditioning"]) == ("h01", "hidden_states[-2]")
    torch.testing.assert_close(states, embeds, atol=1e-6, rtol=1e-6)
    rows = _slot(call, PROMPTS[0], "red")
    assert rows and min(rows) > extra and "red" in pipe.tokenizer.decode(call.input_ids[0, rows].tolist())


def test_lumina2_system_prompt_rows_are_real_and_conditioned(captured):
    """encode_prompt: system_prompt + " <Prompt Start> " + prompt, Gemma 2 with the mask, 256 rows, hidden_states[-2];
    the mask goes to the DiT, so the system prompt's tokens are real tokens; slots sit after it."""
    card, pipe, call, (embeds, mask, _ne, _nm) = captured("tiny-lumina2")
    assert call.seen_texts[0] == pipe.system_prompt + " <Prompt Start> " + PROMPTS[0]
    assert call.input_ids.shape[1] == 256 and call.mask_passed
    assert mask.sum(1).tolist() == call.real.sum(1).tolist()
    info, states = _conditioning(card, pipe, call)
    assert (info["conditioning_layer"], info["conditioning"]) == ("h01", "hidden_states[-2]")
    torch.testing.assert_close(states, embeds, atol=1e-6, rtol=1e-6)
    prefix = len(pipe.tokenizer(pipe.system_prompt + " <Prompt Start>")["input_ids"])
    rows = _slot(call, PROMPTS[0], "red")
    assert rows and min(rows) >= prefix and "red" in pipe.tokenizer.decode(call.input_ids[0, rows].tolist())


def test_z_image_chat_template_and_real_tokens_only(captured):
    """_encode_prompt: Qwen3's chat template (enable_thinking=True: no think block), 512 rows with the mask,
    hidden_states[-2], then only each prompt's real rows (a list of tensors of different lengths)."""
    card, pipe, call, (embeds, _neg) = captured("tiny-z-image")
    assert call.seen_texts[0] == f"<|im_start|>user\n{PROMPTS[0]}<|im_end|>\n<|im_start|>assistant\n"
    no_think = pipe.tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                                  add_generation_prompt=True, enable_thinking=False)
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # Qwen3's switch, kept
    assert call.input_ids.shape[1] == 512 and call.mask_passed
    assert [len(e) for e in embeds] == call.real.sum(1).tolist() and len(set(map(len, embeds))) == 2
    info, states = _conditioning(card, pipe, call)
    assert (info["conditioning_layer"], info["conditioning"]) == ("h01", "hidden_states[-2]")
    for b, e in enumerate(embeds):
        torch.testing.assert_close(states[b][call.real[b]], e, atol=1e-6, rtol=1e-6)
    rows = _slot(call, PROMPTS[0], "red")
    assert rows and "red" in pipe.tokenizer.decode(call.input_ids[0, rows].tolist())


def _last_layer_and(pipe, module, grab):
    """Hook the transformer's last joint layer output and ``grab`` from ``module``'s output."""
    seen = {}
    hooks = [pipe.transformer.layers[-1].register_forward_hook(_keep(seen, "joint", lambda o: o.detach().clone())),
             module.register_forward_hook(_keep(seen, "where", grab))]
    return seen, hooks


def _keep(seen, key, grab):
    """A forward hook that keeps ``grab(output)`` of the first call and returns None (the output is unchanged)."""
    def hook(_m, _i, o):
        seen.setdefault(key, grab(o))
    return hook


def test_lumina2_joint_layers_pool_the_image_rows_only():
    """Lumina2's layers see [caption's real tokens, image, padding] per row; the image rows are where the
    transformer's own rope_embedder puts them (encoder_seq_lengths .. seq_lengths)."""
    torch.set_num_threads(1)
    card = resolve_model("tiny-lumina2")
    pipe = load_pipeline(card, "cpu", "float32")
    seen, hooks = _last_layer_and(pipe, pipe.transformer.rope_embedder, lambda o: (o[4], o[5]))
    try:
        out, info = run_hooked(pipe, PROMPTS, [0, 1], steps=1, guidance=1.0, size=32, call_kwargs=card.call,
                               at_steps=[0])
    finally:
        for h in hooks:
            h.remove()
    caption, total = seen["where"]
    assert caption[0] != caption[1]  # two caption lengths: the image starts at a different row in each
    ref = torch.stack([seen["joint"][i, c:s].mean(0) for i, (c, s) in enumerate(zip(caption, total))])
    last = f"layer{len(pipe.transformer.layers) - 1:02d}__t000-cond"
    np.testing.assert_allclose(out[last], ref.numpy(), rtol=1e-5, atol=1e-6)
    assert info["image_positions"][last[:7]] == total[0] - caption[0]


def test_z_image_joint_layers_pool_the_image_rows_only(monkeypatch):
    """Z-Image's layers see [image (padded to a multiple of 32), caption]; the image rows are the first
    (F/pF)(H/pH)(W/pW) — what the transformer's own unpatchify reads — at a size where padding exists (48 px:
    144 image tokens padded to 160). CFG runs as ONE call [cond, uncond]: labels follow families.yaml cfg_batch."""
    torch.set_num_threads(1)
    card = resolve_model("tiny-z-image")
    pipe = load_pipeline(card, "cpu", "float32")
    t = pipe.transformer
    seen = {}
    real_unpatchify = t.unpatchify

    def unpatchify(x, size, patch_size, f_patch_size, *a, **k):
        seen.setdefault("lengths", [(f // f_patch_size) * (h // patch_size) * (w // patch_size) for f, h, w in size])
        return real_unpatchify(x, size, patch_size, f_patch_size, *a, **k)

    monkeypatch.setattr(t, "unpatchify", unpatchify)
    hook = t.layers[-1].register_forward_hook(_keep(seen, "joint", lambda o: o.detach().clone()))
    try:
        out, info = run_hooked(pipe, PROMPTS, [0, 1], steps=1, guidance=2.0, size=48, call_kwargs=card.call,
                               at_steps=[0])
    finally:
        hook.remove()
    n = seen["lengths"][0]
    assert n == 144 and seen["joint"].shape[1] > 160  # padding and caption rows follow the image rows
    ref = seen["joint"][:, :n].mean(1).numpy()  # batch [cond (2 prompts), uncond (2)]
    last = f"layer{len(t.layers) - 1:02d}__t000"
    np.testing.assert_allclose(out[f"{last}-cond"], ref[:2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[f"{last}-uncond"], ref[2:], rtol=1e-5, atol=1e-6)
    assert info["image_positions"]["refiner00"] == info["image_positions"][last[:7]] == n
