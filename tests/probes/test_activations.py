"""Text-encoder extraction on tiny random encoders (CLIP and T5), in the pipeline's own mode."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from probe_data import make_prompt, make_prompts

from t2i_audit.errors import AuditError
from t2i_audit.probes.capture import activations as A
from t2i_audit.probes.capture import pipeline_text as PT


@pytest.fixture(scope="module")
def sd3():
    """tiny-sd3: two CLIP encoders and a T5 run unmasked at max_sequence_length, as SD3 does."""
    from t2i_audit.tiny import materialize

    return PT.PipelineTextEncoder(PT.load_text_pipeline(str(materialize("tiny-sd3"))))


def test_discovery_finds_both_encoders(tiny_model_dir):
    info = A.resolve_text_encoders(str(tiny_model_dir))
    assert info["text_encoders"] == [
        {"name": "text_encoder", "tokenizer": "tokenizer", "kind": "clip"},
        {"name": "text_encoder_3", "tokenizer": "tokenizer_3", "kind": "t5"},
    ]
    with pytest.raises(AuditError, match="no model card of that name and no such folder|unknown model"):
        A.resolve_text_encoders("no-such-model-xyz")


@pytest.mark.parametrize("name,n_hidden,has_final", [("text_encoder", 6, True), ("text_encoder_3", 3, False)])
def test_shapes_layers_and_conditioning_layer(sd3, name, n_hidden, has_final):
    prompts = [make_prompt("red", "cube", "blue", "sphere"), make_prompt("green", "dog", "purple", "cup")]
    res = sd3.encode([p["text"] for p in prompts], [p["spans"] for p in prompts],
                     slot_names=["c1", "o1", "c2", "o2", "zz"])[name]
    layers = [f"h{i:02d}" for i in range(n_hidden)] + (["final"] if has_final else []) + (
        ["pooled"] if name == "text_encoder" else [])
    assert res["_layers"] == layers
    # SD3 conditions on CLIP's penultimate hidden state and on T5's output
    assert res["_info"]["conditioning_layer"] == ("h04" if name == "text_encoder" else "h02")
    assert res["_info"]["mask_passed"] is False
    assert res["_info"]["sequence_length"] == (77 if name == "text_encoder" else 256)
    for layer in (x for x in layers if x != "pooled"):
        for pool in ("eos", "mean", "slot-c1", "slot-o2"):
            assert res[f"{layer}__{pool}"].shape[0] == 2
            assert np.isfinite(res[f"{layer}__{pool}"]).all()
        assert np.isnan(res[f"{layer}__slot-zz"]).all()  # a slot no prompt has
    assert not res["_truncated"].any()


def test_batching_does_not_change_a_prompt(sd3):
    prompts = [make_prompt("red", "cube", "blue", "sphere"), make_prompt("green", "dog", "purple", "cup")]
    texts, spans = [p["text"] for p in prompts], [p["spans"] for p in prompts]
    both = sd3.encode(texts, spans, slot_names=["c1"])
    alone = sd3.encode(texts[1:], spans[1:], slot_names=["c1"])
    for enc in ("text_encoder", "text_encoder_3"):
        np.testing.assert_allclose(alone[enc]["h01__eos"][0], both[enc]["h01__eos"][1], atol=1e-5)
        np.testing.assert_allclose(alone[enc]["h01__slot-c1"][0], both[enc]["h01__slot-c1"][1], atol=1e-5)


@pytest.mark.parametrize("name", ["text_encoder", "text_encoder_3"])
def test_slot_pooling_picks_the_slot_tokens(sd3, name):
    p = make_prompt("red", "cube", "blue", "sphere")
    res = sd3.encode([p["text"]], [p["spans"]], slot_names=["c1", "o2"])[name]
    calls, _ = PT.capture_encoder_calls(sd3.pipe, [p["text"]])
    call = next(c for c in calls if c.encoder == name)
    hs = call.output.hidden_states
    tok = getattr(sd3.pipe, PT.tokenizer_for(name))
    toks = tok.convert_ids_to_tokens(call.input_ids[0])
    pieces = [t.replace("</w>", "").replace("\u2581", "") for t in toks]
    red = [i for i, t in enumerate(pieces) if t == "red"]
    assert len(red) == 1
    np.testing.assert_allclose(res["h02__slot-c1"][0], hs[2][0, red].mean(0).numpy(), atol=1e-5)
    idx = [i for i, (a, b) in enumerate(call.offsets[0]) if b > a and p["spans"]["o2"][0] <= a < p["spans"]["o2"][1]]
    assert "".join(pieces[i] for i in idx) == "sphere"
    np.testing.assert_allclose(res["h01__slot-o2"][0], hs[1][0, idx].mean(0).numpy(), atol=1e-5)
    # eos = the last real token; mean = mean over the real tokens only (not the padding)
    n_real = int(call.real[0].sum())
    assert n_real < call.input_ids.shape[1]
    np.testing.assert_allclose(res["h01__eos"][0], hs[1][0, n_real - 1].numpy(), atol=1e-5)
    np.testing.assert_allclose(res["h01__mean"][0], hs[1][0, :n_real].mean(0).numpy(), atol=1e-5)


def test_token_slots_from_offsets_only_real_tokens():
    offsets = [(0, 0), (0, 1), (2, 5), (5, 7), (8, 11), (0, 0)]
    real = [1, 1, 1, 1, 1, 0]
    assert PT.token_slots(offsets, {"o1": [2, 7], "c1": [8, 11], "x": [20, 22]}, ["o1", "c1", "x"], real) == {
        "o1": [2, 3], "c1": [4]}
    assert PT.token_slots(offsets, {"c1": [8, 11]}, ["c1"], [1, 1, 1, 1, 0, 0]) == {}


def test_spans_map_through_templates_and_cleaning():
    prompt = "A Red cube left of a blue sphere"
    spans = {"c1": (2, 5), "o2": (26, 32)}
    templated = "<|im_start|>user\nDescribe: " + prompt + "<|im_end|>"
    moved = PT.map_spans(prompt, templated, spans)
    assert templated[slice(*moved["c1"])] == "Red" and templated[slice(*moved["o2"])] == "sphere"
    cleaned = "a red cube left of a blue sphere"  # PixArt's clean_caption lower-cases
    moved = PT.map_spans(prompt, cleaned, spans)
    assert cleaned[slice(*moved["c1"])] == "red" and cleaned[slice(*moved["o2"])] == "sphere"
    assert PT.map_spans(prompt, None, spans) == {}


def test_select_layers():
    names = ["h00", "h01", "h02", "final", "pooled"]
    assert PT.select_layers("all", names, "h01") == names
    assert PT.select_layers("last", names, None) == ["final"]
    assert PT.select_layers("0,-1,final", names, None) == ["h00", "h02", "final"]
    assert PT.select_layers("0,final", ["h00", "h01", "h02"], None) == ["h00", "h02"]  # T5: output = last block
    assert PT.select_layers("conditioning,pooled", names, "h01") == ["h01", "pooled"]
    assert PT.select_layers("conditioning", names, None) == []
    with pytest.raises(AuditError, match="--layers: '9' is not a layer"):
        PT.select_layers("9", names, None)


def test_truncation_is_recorded(sd3):
    long = "a photo of " + " and ".join(["a red cube"] * 40)
    res = sd3.encode([long, "a dog"], [{}, {}], poolings=("eos",))
    assert res["text_encoder"]["_truncated"].tolist() == [True, False]  # CLIP: 77 tokens
    assert res["text_encoder_3"]["_truncated"].tolist() == [False, False]  # T5: 256


def test_extraction_stores_float16_resumes_and_is_idempotent(tmp_path, capsys, monkeypatch):
    prompts = make_prompts(300, seed=0)
    monkeypatch.setattr(A, "CHUNK", 128)
    out = tmp_path / "activations"
    calls, die = [], [True]
    real = PT.PipelineTextEncoder.encode

    def counting(self, texts, *a, **k):
        calls.append(len(texts))
        if die[0] and len(calls) == 6:  # die in the middle of the second chunk
            die[0] = False
            raise RuntimeError("killed")
        return real(self, texts, *a, **k)

    monkeypatch.setattr(PT.PipelineTextEncoder, "encode", counting)
    kw = dict(batch_size=32, layers="0,final,conditioning", progress=True)
    with pytest.raises(RuntimeError, match="killed"):
        A.extract_text_activations(prompts, out, "tiny-sd", **kw)
    assert "encode_prompt" in capsys.readouterr().err and not (out / "text_encoder" / "meta.json").exists()
    assert len(list((out / "text_encoder" / ".parts").rglob("part_*.npz"))) == 1
    calls.clear()
    meta = A.extract_text_activations(prompts, out, "tiny-sd", **kw)["text_encoder"]
    assert sum(calls) == 300 - 128  # the finished chunk was not redone
    assert meta["layers"] == ["h00", "final"] and meta["n"] == 300
    assert meta["conditioning_layer"] == "final" and meta["pipeline"] == "StableDiffusionPipeline"
    assert meta["poolings"] == ["eos", "mean", "slot-c1", "slot-c2", "slot-o1", "slot-o2"]
    enc_dir = out / "text_encoder"
    arr = np.load(enc_dir / "final__slot-o1.npy")
    assert arr.dtype == np.float16 and arr.shape == (300, 32)
    _, ids = A.load_activations(enc_dir)
    assert ids == [p["id"] for p in prompts]
    assert not (enc_dir / ".parts").exists()
    calls.clear()
    again = A.extract_text_activations(prompts, out, "tiny-sd", **kw)["text_encoder"]
    assert calls == [] and again == json.loads((enc_dir / "meta.json").read_text())
    with pytest.raises(AuditError, match="--poolings: unknown"):
        A.extract_text_activations(prompts, out, "tiny-sd", poolings=("max",))


def test_slot_spans_of_expanded_suite_records_hit_their_words(sd3, tmp_path):
    """Records from the real suite expansion: every slot's tokens spell the slot's value."""
    from t2i_audit.prompts import expand, load_suite

    suite = tmp_path / "s.yaml"
    suite.write_text("""
suite: spans
version: 1
concepts:
  objects: {family: object, values: [cube, teddy bear, {name: knife, plural: knives}]}
  colors: {family: color, values: [orange, red]}
templates:
  - name: two
    category: color_binding
    text: "a photo of {c1.a} {o1} and {c2.a} {o2}"
    slots: {c1: colors, o1: objects, c2: colors, o2: objects}
    constraints: ["o1 != o2", "c1 != c2"]
    expect:
      objects: [{id: o1, color: c1}, {id: o2, color: c2}]
""")
    records = expand(load_suite(suite))
    assert records
    calls, _ = PT.capture_encoder_calls(sd3.pipe, [r["text"] for r in records])
    for call in calls:
        for b, r in enumerate(records):
            off = call.offsets[b]
            slots = PT.token_slots(off, r["spans"], list(r["slots"]), call.real[b])
            assert set(slots) == set(r["slots"])
            for slot, idx in slots.items():
                assert idx == list(range(idx[0], idx[-1] + 1))  # contiguous tokens
                assert r["text"][off[idx[0]][0]:off[idx[-1]][1]].strip() == r["slots"][slot]


def test_loading_the_text_encoders_shows_no_library_bars():
    """`probe RUN -q` printed diffusers' and transformers' loading bars (--quiet hides our bars only)."""
    import transformers
    from diffusers.utils import logging as diffusers_logging

    from t2i_audit.mini.cli import WEIGHTS
    from t2i_audit.probes.capture.pipeline_text import load_text_pipeline

    diffusers_logging.enable_progress_bar()
    transformers.utils.logging.enable_progress_bar()
    pipe = load_text_pipeline(str(WEIGHTS / "generator"))
    assert pipe.text_encoder is not None and pipe.unet is None
    assert not diffusers_logging.is_progress_bar_enabled()
    assert not transformers.utils.logging.is_progress_bar_enabled()
