"""Every text encoder of every harness family, read as its pipeline runs it (issue 19 §2).

A property over the registry, not hand-picked encoders: for each family in harness.FAMILIES and EACH encoder the
pipeline loads (``text_components``), the card stores it, the harness says where its states reach the denoiser,
every stored layer x pooling array is finite (zeros exactly where the pipeline never ran the encoder and the
denoiser gets zeros: HunyuanImage's ByT5 on a prompt without quoted text), and its per-token states at the
conditioning layer equal the rows the denoiser receives (eos / mean pooled from those rows).

The prompts carry an apostrophe pair and a quoted word: pipeline_hunyuanimage.py ``extract_glyph_text`` reads
``'s bone and a cat'`` and ``"hello"`` as glyph text, so ByT5 runs twice in one ``encode_prompt`` and not for the
plain prompt. Slot ``o1`` is a word of each prompt: found by every encoder whose tokenizer gives offsets.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t2i_audit.generate import effective_batch_size, load_pipeline
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture import pipeline_text as PT
from t2i_audit.probes.capture.activations import extract_text_activations, load_activations, load_array

from .harness import FAMILIES, PROMPTS, as_denoiser_sees, denoiser_inputs, real_rows

READS = ["a dog's bone and a cat's toy", 'a sign that says "hello"', "a red cube to the left of a blue sphere"]
WORDS = ["bone", "sign", "cube"]


def _records(texts, words):
    return [{"id": f"p{i}", "text": t, "spans": {"o1": (t.index(w), t.index(w) + len(w))}}
            for i, (t, w) in enumerate(zip(texts, words))]


def _where(spec: dict, enc: str):
    """(denoiser kwarg, rows, cols) of an encoder's per-token states, or None (pooled vector only)."""
    if enc in spec["states"]:
        return ("encoder_hidden_states", *spec["states"][enc])
    return (spec.get("streams") or {}).get(enc)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_encoder_is_stored_finite_and_as_the_denoiser_gets_it(family, tmp_path):
    torch.set_num_threads(1)
    card, spec = resolve_model(family), FAMILIES[family]
    pipe = load_pipeline(card, "cpu", "float32")
    text_pipe = PT.load_text_pipeline(card.pretrained_path())
    encoders = PT.text_components(text_pipe)
    assert sorted(e["name"] for e in card.text_encoders) == encoders, "the card stores every encoder the pipeline runs"
    unplaced = [e for e in encoders if _where(spec, e) is None and e not in spec["pooled"]]
    assert not unplaced, f"harness.FAMILIES[{family!r}] does not say where {unplaced} reach the denoiser"

    records = _records(READS, WORDS)
    extract_text_activations(records, tmp_path, family, layers="all", progress=False)
    # batches as extraction (and generation) makes them: one prompt at a time for a batch-dependent family
    step, _ = effective_batch_size(card.pipeline, len(READS))
    for start in range(0, len(READS), step):
        texts, rows = READS[start:start + step], slice(start, start + step)
        ref = denoiser_inputs(pipe, texts, card.call)
        calls = {c.encoder: c for c in PT.capture_encoder_calls(text_pipe, texts, card.call)[0]}
        for enc in encoders:
            call, (meta, _) = calls[enc], load_activations(tmp_path / enc)
            encoded = getattr(call, "encoded", None)  # None: every prompt
            ran = np.ones(len(texts), bool) if encoded is None else encoded.numpy()
            for name in meta["arrays"]:
                if "__slot-" in name and call.offsets is None:
                    continue  # no offsets (ByT5's byte tokenizer): slots unavailable, recorded in the notes
                arr = load_array(tmp_path / enc, name)[rows].astype(np.float32)
                if "__slot-" in name:  # a prompt the encoder never saw has no slot token (NaN: not found)
                    assert np.isfinite(arr[ran]).all(), f"{family}/{enc}/{name}: a slot not found"
                    continue
                assert np.isfinite(arr).all(), f"{family}/{enc}/{name}: not finite"
                assert not arr[~ran].any(), f"{family}/{enc}/{name}: not the zeros the denoiser gets"
            tensors = PT.layer_tensors(call)
            if enc in spec["pooled"]:
                kwarg, cols = spec["pooled"][enc]
                torch.testing.assert_close(tensors["pooled"], ref[kwarg][:, cols], atol=1e-5, rtol=1e-5)
                np.testing.assert_allclose(load_array(tmp_path / enc, "pooled__prompt")[rows].astype(np.float32),
                                           ref[kwarg][:, cols].numpy(), rtol=2e-3, atol=2e-3)
            where = _where(spec, enc)
            if where is None:
                assert meta["conditioning_layer"] == "pooled", (family, enc)
                continue
            kwarg, r, c = where
            layer, theirs = meta["conditioning_layer"], ref[kwarg][:, r, c]
            ours = as_denoiser_sees(family, call, tensors[layer])
            torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5, msg=f"{family}/{enc} at {layer}")
            real = real_rows(family, call)
            for b in range(len(texts)):
                if not ran[b]:
                    assert not theirs[b].any()  # the pipeline gives the denoiser zeros for it
                    continue
                got = theirs[b][real[b]].numpy()
                for pooling, want in (("eos", got[-1]), ("mean", got.mean(0))):
                    stored = load_array(tmp_path / enc, f"{layer}__{pooling}")[start + b].astype(np.float32)
                    np.testing.assert_allclose(stored, want, rtol=2e-3, atol=2e-3, err_msg=f"{family}/{enc}/{pooling}")


def test_a_batch_without_quoted_text_stores_hunyuan_byt5_as_absent(tmp_path):
    """No prompt has glyph text: the pipeline never runs ByT5 (the denoiser's encoder_hidden_states_2 is zeros);
    the encoder is still stored, every layer, all zeros as the denoiser gets — not a missing encoder."""
    torch.set_num_threads(1)
    family = "tiny-hunyuan-image"
    records = _records(PROMPTS, ["cube", "dogs"])
    metas = extract_text_activations(records, tmp_path, family, layers="all", progress=False)
    meta = metas["text_encoder_2"]
    assert meta["layers"] == ["h00", "h01", "h02"] and meta["sequence_length"] is None
    eos_mean = [a for a in meta["arrays"] if a.endswith(("__eos", "__mean"))]
    assert eos_mean and all(not load_array(tmp_path / "text_encoder_2", a).any() for a in eos_mean)
    assert any("extract_glyph_text" in n for n in meta["notes"])
    ref = denoiser_inputs(load_pipeline(resolve_model(family), "cpu", "float32"), PROMPTS)
    assert ref["encoder_hidden_states_2"].shape[1] == 128 and not ref["encoder_hidden_states_2"].any()
