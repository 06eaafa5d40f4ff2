"""Text activations pinned to what each pipeline itself feeds its denoiser, per tiny family.

The reference is not our code: a forward pre-hook on the UNet / transformer of a real ``pipe(...)``
call records the conditioning it receives (so the pipeline's ``__call__`` defaults — max length,
caption cleaning, mask — are part of the reference). Tolerances: float32 on CPU, same kernels →
1e-5; stored arrays are float16 → 2e-3 relative + 2e-3 absolute.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t2i_audit.families import pipeline_family
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture import pipeline_text as PT
from t2i_audit.probes.capture.activations import extract_text_activations, load_activations, load_array

from .harness import FAMILIES, PROMPTS, as_denoiser_sees, denoiser_inputs, real_rows


@pytest.fixture(scope="module")
def family_data():
    """Per family: our captured encoder calls and the denoiser's own conditioning (built once)."""
    from t2i_audit.generate import load_pipeline

    torch.set_num_threads(1)
    cache = {}

    def get(name):
        if name not in cache:
            card = resolve_model(name)
            pipe = load_pipeline(card, "cpu", "float32")
            reference = denoiser_inputs(pipe, PROMPTS, card.call)
            text_pipe = PT.load_text_pipeline(card.pretrained_path())
            encoder = PT.PipelineTextEncoder(text_pipe, card.call)
            calls, _ = PT.capture_encoder_calls(text_pipe, PROMPTS, card.call)
            cache[name] = (card, encoder, {c.encoder: c for c in calls}, reference)
        return cache[name]

    return get


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_conditioning_layer_states_equal_the_denoiser_input(family_data, family):
    """Every token (real and padding) of the conditioning layer equals what the denoiser gets."""
    card, encoder, calls, ref = family_data(family)
    for enc, (rows, cols) in FAMILIES[family]["states"].items():
        call = calls[enc]
        layer = encoder.describe(enc, call)["conditioning_layer"]
        ours = as_denoiser_sees(family, call, PT.layer_tensors(call)[layer])
        theirs = ref["encoder_hidden_states"][:, rows, cols]
        assert ours.shape == theirs.shape, (enc, layer)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5, msg=f"{family}/{enc} at {layer}")


@pytest.mark.parametrize("family", sorted(f for f in FAMILIES if FAMILIES[f]["pooled"]))
def test_pooled_vector_equals_the_denoiser_input(family_data, family):
    card, encoder, calls, ref = family_data(family)
    for enc, (kwarg, cols) in FAMILIES[family]["pooled"].items():
        assert encoder.describe(enc, calls[enc])["pooled_used"] is True
        torch.testing.assert_close(PT.layer_tensors(calls[enc])["pooled"], ref[kwarg][:, cols], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_stored_arrays_equal_pooled_denoiser_input(family_data, family, tmp_path):
    """The float16 arrays on disk (eos, mean) at the conditioning layer = the denoiser's conditioning
    pooled over the real tokens — the number every probe is fitted on. A batch-dependent family
    (CogView 4) is generated and encoded one prompt at a time, so its reference is each prompt alone."""
    card, encoder, calls, ref = family_data(family)
    prompts = [{"id": f"p{i}", "text": t, "spans": {}} for i, t in enumerate(PROMPTS)]
    metas = extract_text_activations(prompts, tmp_path, family, layers="conditioning", progress=False)
    alone = (pipeline_family(card.pipeline) or {}).get("batch_dependent")
    for enc, (rows, cols) in FAMILIES[family]["states"].items():
        meta, ids = load_activations(tmp_path / enc)
        assert ids == ["p0", "p1"] and meta == metas[enc]
        layer = meta["conditioning_layer"]
        assert meta["layers"] == [layer]
        for b in range(len(PROMPTS)):
            ref_b, calls_b, i = (*_alone_reference(card, PROMPTS[b]), 0) if alone else (ref, calls, b)
            theirs = ref_b["encoder_hidden_states"][:, rows, cols].float().numpy()[i]
            real = real_rows(family, calls_b[enc])[i].numpy()  # left padding (CogView4) puts the real tokens last
            eos = load_array(tmp_path / enc, f"{layer}__eos")[b].astype(np.float32)
            mean = load_array(tmp_path / enc, f"{layer}__mean")[b].astype(np.float32)
            np.testing.assert_allclose(eos, theirs[real][-1], rtol=2e-3, atol=2e-3)
            np.testing.assert_allclose(mean, theirs[real].mean(0), rtol=2e-3, atol=2e-3)


def _alone_reference(card, text):
    from t2i_audit.generate import load_pipeline

    ref = denoiser_inputs(load_pipeline(card, "cpu", "float32"), [text], card.call)
    calls, _ = PT.capture_encoder_calls(PT.load_text_pipeline(card.pretrained_path()), [text], card.call)
    return ref, {c.encoder: c for c in calls}


def test_t5_runs_as_each_pipeline_runs_it(family_data):
    """SD3 / FLUX: T5 without a mask over max_sequence_length tokens; PixArt-Σ: masked, 300 tokens."""
    expect = {("tiny-sd3", "text_encoder_3"): (False, 256), ("tiny-flux", "text_encoder_2"): (False, 512),
              ("tiny-pixart", "text_encoder"): (True, 300)}
    for (family, enc), (masked, length) in expect.items():
        _, encoder, calls, _ = family_data(family)
        info = encoder.describe(enc, calls[enc])
        assert (info["mask_passed"], info["sequence_length"]) == (masked, length), family
        # the real tokens are fewer than the sequence: the padding is part of what the DiT attends to
        assert int(calls[enc].real[0].sum()) < length


def test_pixart_clean_caption_default_of_call_is_used(family_data):
    """``encode_prompt`` defaults clean_caption to False but ``__call__`` to True: a run that does not set
    it cleans (lower-cases) captions, so the extractor must do what the call does."""
    from t2i_audit.generate import load_pipeline

    card = resolve_model("tiny-pixart")
    text_pipe = PT.load_text_pipeline(card.pretrained_path())
    call = {k: v for k, v in card.call.items() if k != "clean_caption"}
    assert PT.encode_kwargs(text_pipe, call)["clean_caption"] is True
    calls, _ = PT.capture_encoder_calls(text_pipe, PROMPTS, call)
    pipe = load_pipeline(card, "cpu", "float32")
    ref = denoiser_inputs(pipe, PROMPTS, call)
    ours = PT.layer_tensors(calls[0])[PT.PipelineTextEncoder(text_pipe, call).describe("text_encoder", calls[0])
                                      ["conditioning_layer"]]
    torch.testing.assert_close(ours, ref["encoder_hidden_states"], atol=1e-5, rtol=1e-5)
