"""HiDream (issue 13): what the generic fidelity tests cannot see.

pipeline_hidream_image.py ``_get_llama3_prompt_embeds`` stacks ALL of Llama's ``hidden_states[1:]``; the
transformer (transformer_hidream_image.py ``forward``) hands block i the entry ``llama_layers[i]`` and keeps
``[T5, stack[llama_layers[-1]]]`` as the text stream of every block. Its single-stream blocks return one
``[image, text]`` sequence; ``__call__`` rescales any size to the area of ``default_sample_size`` latents.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from t2i_audit.errors import AuditError
from t2i_audit.generate import load_pipeline
from t2i_audit.models import ModelCard, resolve_model
from t2i_audit.probes.capture import pipeline_text as PT
from t2i_audit.probes.capture.denoiser import run_hooked

from .harness import PROMPTS, denoiser_inputs

HIDREAM = "tiny-hidream"


@pytest.fixture(scope="module")
def hidream():
    torch.set_num_threads(1)
    card = resolve_model(HIDREAM)
    pipe = load_pipeline(card, "cpu", "float32")
    text_pipe = PT.load_text_pipeline(card.pretrained_path())
    calls, _ = PT.capture_encoder_calls(text_pipe, PROMPTS, card.call)
    return card, pipe, text_pipe, {c.encoder: c for c in calls}


def test_every_block_gets_a_stored_llama_layer(hidream):
    """Each block's Llama entry (llama_layers[i] of hidden_states[1:]) is our stored layer h{llama_layers[i]+1},
    and the conditioning layer (the text stream's Llama entry) is hidden_states[-1]."""
    card, pipe, text_pipe, calls = hidream
    ref = denoiser_inputs(pipe, PROMPTS, card.call)
    call = calls["text_encoder_4"]
    layers = PT.layer_tensors(call)
    llama_layers = list(pipe.transformer.config.llama_layers)
    n_blocks = len(pipe.transformer.double_stream_blocks) + len(pipe.transformer.single_stream_blocks)
    assert llama_layers == [0, 1] and n_blocks == len(llama_layers)
    stack = ref["encoder_hidden_states_llama3"]
    assert stack.shape[0] == len(layers) - 1 == 2  # hidden_states[1:]: every layer but the embeddings
    for k in llama_layers:
        torch.testing.assert_close(layers[f"h{k + 1:02d}"], stack[k], atol=1e-5, rtol=1e-5)
    info = PT.PipelineTextEncoder(text_pipe, card.call).describe("text_encoder_4", call)
    assert (info["conditioning_layer"], info["conditioning"]) == ("h02", "hidden_states[-1]")
    assert info["mask_passed"] is True and info["sequence_length"] == 128  # max_sequence_length, padded
    assert "llama_layers" in info["per_block_layers"]  # meta.json says the other layers feed blocks too
    # Llama 3's kind: <|begin_of_text|> first, padded on the right with the eos token (the pipeline sets pad = eos)
    tok = text_pipe.tokenizer_4
    assert (call.input_ids[:, 0] == tok.convert_tokens_to_ids("<|begin_of_text|>")).all()
    assert tok.pad_token == tok.eos_token == "<|eot_id|>" and not bool(call.real[0, -1])
    assert call.untruncated_lengths == call.real.sum(1).tolist()


def test_clips_give_only_the_pooled_vector(hidream):
    card, _, text_pipe, calls = hidream
    enc = PT.PipelineTextEncoder(text_pipe, card.call)
    for name in ("text_encoder", "text_encoder_2"):
        info = enc.describe(name, calls[name])
        assert (info["conditioning_layer"], info["pooled_used"]) == ("pooled", True)
        assert info["sequence_length"] == 128  # _get_clip_prompt_embeds: min(max_sequence_length, 218)


@pytest.mark.parametrize("size", [32, 64])
def test_hooked_tensors_are_the_image_tokens_of_the_rescaled_latent(hidream, size):
    """Any size becomes default_sample_size (128) latents a side (256 px here, 1024 px for the real model): 256
    image tokens at patch 8 in both block kinds; a single-stream block's pooled state is the mean over its image
    rows only (checked against the block's own output), not over the text rows it also returns."""
    card, pipe, _, _ = hidream
    single = pipe.transformer.single_stream_blocks[0]
    seen = []
    h = single.register_forward_hook(lambda _m, _i, out: seen.append(out.detach().clone()))
    try:
        out, info = run_hooked(pipe, ["a red cube"], [0], steps=1, guidance=2.0, size=size,
                               call_kwargs=card.call, at_steps=[0], output_type="np")
    finally:
        h.remove()
    assert info["images"].shape == (1, 256, 256, 3)
    tokens = (pipe.default_sample_size // pipe.transformer.config.patch_size) ** 2
    assert info["image_positions"] == {"double00": tokens, "single00": tokens} and seen[0].shape[1] > tokens
    assert set(out) == {f"{b}__t000-{h}" for b in ("double00", "single00") for h in ("cond", "uncond")}
    cond = seen[0][1:2]  # CFG batches [uncond, cond]
    torch.testing.assert_close(torch.as_tensor(out["single00__t000-cond"]), cond[:, :tokens].mean(1))
    assert not torch.allclose(torch.as_tensor(out["single00__t000-cond"]), cond.mean(1), atol=1e-4)


def test_card_components_supply_the_llama_the_repo_does_not_ship(hidream, tmp_path):
    """The HiDream-ai repos ship no tokenizer_4 / text_encoder_4 (null here in model_index.json): loading fails
    without them, and the card's `components` (a local tiny Llama folder standing in for meta-llama's repo) are
    loaded and passed to from_pretrained by load_pipeline and load_text_pipeline, with the same numbers."""
    card, pipe, _, _ = hidream
    folder, llama = tmp_path / "hidream", tmp_path / "llama"
    shutil.copytree(card.pretrained_path(), folder)
    llama.mkdir()
    for sub in ("text_encoder_4", "tokenizer_4"):  # one folder holding both, as meta-llama/Meta-Llama-3.1-8B-Instruct
        for f in (folder / sub).iterdir():
            shutil.move(str(f), llama / f.name)
        (folder / sub).rmdir()
    index = json.loads((folder / "model_index.json").read_text())
    index["text_encoder_4"] = index["tokenizer_4"] = [None, None]
    (folder / "model_index.json").write_text(json.dumps(index))

    bare = ModelCard(name="hidream-no-llama", local=str(folder))
    with pytest.raises(AuditError, match="text_encoder_4"):
        load_pipeline(bare, "cpu", "float32")
    comps = {"tokenizer_4": {"repo": str(llama), "class": "AutoTokenizer"},
             "text_encoder_4": {"repo": str(llama), "class": "LlamaForCausalLM"}}
    with_llama = ModelCard(name="hidream-with-llama", local=str(folder), components=comps)
    assert [e["name"] for e in bare.text_encoders] == ["text_encoder", "text_encoder_2", "text_encoder_3"]
    assert with_llama.text_encoders[-1] == {"name": "text_encoder_4", "tokenizer": "tokenizer_4", "kind": "llama"}
    loaded = load_pipeline(with_llama, "cpu", "float32")
    assert type(loaded.text_encoder_4).__name__ == "LlamaForCausalLM"
    ours, ref = denoiser_inputs(loaded, PROMPTS), denoiser_inputs(pipe, PROMPTS)
    torch.testing.assert_close(ours["encoder_hidden_states_llama3"], ref["encoder_hidden_states_llama3"])
    text_pipe = PT.load_text_pipeline(str(folder), components=with_llama.load_components(text_only=True))
    assert PT.text_components(text_pipe)[-1] == "text_encoder_4"
    call = {c.encoder: c for c in PT.capture_encoder_calls(text_pipe, PROMPTS)[0]}["text_encoder_4"]
    torch.testing.assert_close(PT.layer_tensors(call)["h02"], ref["encoder_hidden_states_llama3"][-1])
