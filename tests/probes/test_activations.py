"""Text-encoder extraction on tiny random encoders (CLIP and T5) built from configs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from probe_data import make_prompt, make_prompts

from t2i_audit.errors import AuditError
from t2i_audit.probes import activations as A


@pytest.fixture(scope="module")
def encoders(tiny_model_dir):
    info = A.resolve_text_encoders(str(tiny_model_dir))
    return {e["name"]: A.load_text_encoder(info["path"], e) for e in info["text_encoders"]}


def test_discovery_finds_both_encoders(tiny_model_dir):
    info = A.resolve_text_encoders(str(tiny_model_dir))
    assert info["text_encoders"] == [
        {"name": "text_encoder", "tokenizer": "tokenizer", "kind": "clip"},
        {"name": "text_encoder_3", "tokenizer": "tokenizer_3", "kind": "t5"},
    ]
    with pytest.raises(AuditError, match="no model card of that name and no such folder|unknown model"):
        A.resolve_text_encoders("no-such-model-xyz")


@pytest.mark.parametrize("name,n_layers,has_final", [("text_encoder", 4, True), ("text_encoder_3", 3, False)])
def test_shapes_and_layers(encoders, name, n_layers, has_final):
    tok, model = encoders[name]
    prompts = [make_prompt("red", "cube", "blue", "sphere"), make_prompt("green", "dog", "purple", "cup")]
    res = A.encode_batch([p["text"] for p in prompts], [p["spans"] for p in prompts], tok, model,
                         slot_names=["c1", "o1", "c2", "o2", "zz"])
    layers = [f"h{i:02d}" for i in range(n_layers)] + (["final"] if has_final else [])
    assert res["_layers"] == layers
    dim = model.config.hidden_size
    for layer in layers:
        for pool in ("eos", "mean", "slot-c1", "slot-o2"):
            assert res[f"{layer}__{pool}"].shape == (2, dim)
            assert np.isfinite(res[f"{layer}__{pool}"]).all()
        assert np.isnan(res[f"{layer}__slot-zz"]).all()  # a slot no prompt has
    assert not res["_truncated"].any()


@pytest.mark.parametrize("name", ["text_encoder", "text_encoder_3"])
def test_padding_to_longest_equals_padding_to_77(encoders, name):
    tok, model = encoders[name]
    prompts = [make_prompt("red", "cube", "blue", "sphere"), make_prompt("green", "dog", "purple", "cup")]
    texts = [p["text"] for p in prompts] + ["a dog"]
    spans = [p["spans"] for p in prompts] + [{"o1": [2, 5]}]
    short = A.encode_batch(texts, spans, tok, model, slot_names=["c1", "o1"])
    long = A.encode_batch(texts, spans, tok, model, slot_names=["c1", "o1"], pad_to=77)
    assert set(short) == set(long)
    for k in short:
        if not k.startswith("_"):
            np.testing.assert_allclose(short[k], long[k], atol=1e-5, rtol=1e-4, equal_nan=True)
    # and batching does not change a prompt's states
    alone = A.encode_batch(texts[2:], spans[2:], tok, model, slot_names=["c1", "o1"])
    np.testing.assert_allclose(alone["h01__eos"][0], short["h01__eos"][2], atol=1e-5)


@pytest.mark.parametrize("name", ["text_encoder", "text_encoder_3"])
def test_slot_pooling_picks_the_slot_tokens(encoders, name):
    tok, model = encoders[name]
    p = make_prompt("red", "cube", "blue", "sphere")
    res = A.encode_batch([p["text"]], [p["spans"]], tok, model, slot_names=["c1", "o2"])
    enc = tok([p["text"]], return_tensors="pt")
    with torch.inference_mode():
        hs = model(**enc, output_hidden_states=True).hidden_states
    toks = tok.convert_ids_to_tokens(enc["input_ids"][0])
    pieces = [t.replace("</w>", "").replace("\u2581", "") for t in toks]
    red = [i for i, t in enumerate(pieces) if t == "red"]
    assert len(red) == 1
    np.testing.assert_allclose(res["h02__slot-c1"][0], hs[2][0, red].mean(0).numpy(), atol=1e-5)
    # "sphere" may be split into several BPE pieces: the slot is the mean over all of them
    start = len(tok(p["text"][: p["spans"]["o2"][0]], add_special_tokens=False)["input_ids"])
    n = len(tok("sphere", add_special_tokens=False)["input_ids"])
    first = 1 if toks[0] in ("<|startoftext|>",) else 0
    idx = list(range(first + start, first + start + n))
    assert "".join(pieces[i] for i in idx) == "sphere"
    np.testing.assert_allclose(res["h01__slot-o2"][0], hs[1][0, idx].mean(0).numpy(), atol=1e-5)
    # eos = the last real token; mean = masked mean over real tokens
    np.testing.assert_allclose(res["h01__eos"][0], hs[1][0, -1].numpy(), atol=1e-5)
    np.testing.assert_allclose(res["h01__mean"][0], hs[1][0].mean(0).numpy(), atol=1e-5)


def test_token_slots_from_offsets():
    offsets = [(0, 0), (0, 1), (2, 5), (5, 7), (8, 11), (0, 0)]
    assert A.token_slots(offsets, {"o1": [2, 7], "c1": [8, 11], "x": [20, 22]}, ["o1", "c1", "x"]) == {
        "o1": [2, 3], "c1": [4]}


def test_select_layers():
    assert A.select_layers("all", 3, True) == ["h00", "h01", "h02", "final"]
    assert A.select_layers("last", 3, False) == ["h02"]
    assert A.select_layers("0,-1,final", 3, True) == ["h00", "h02", "final"]
    assert A.select_layers("0,final", 3, False) == ["h00", "h02"]  # T5: output = last block
    with pytest.raises(AuditError, match="--layers: '9' is not a layer"):
        A.select_layers("9", 3, True)


def test_truncation_is_recorded(encoders):
    tok, model = encoders["text_encoder"]
    long = "a photo of " + " and ".join(["a red cube"] * 40)
    res = A.encode_batch([long, "a dog"], [{}, {}], tok, model, poolings=("eos",))
    assert res["_truncated"].tolist() == [True, False]


def test_extract_to_dir_stores_float16_resumes_and_is_idempotent(encoders, tmp_path, capsys, monkeypatch):
    tok, model = encoders["text_encoder"]
    prompts = make_prompts(300, seed=0)
    monkeypatch.setattr(A, "CHUNK", 128)
    enc_dir = tmp_path / "text_encoder"
    calls, die = [], [True]
    real = A.encode_batch

    def counting(*a, **k):
        calls.append(len(a[0]))
        if die[0] and len(calls) == 6:  # die in the middle of the second chunk
            die[0] = False
            raise RuntimeError("killed")
        return real(*a, **k)

    monkeypatch.setattr(A, "encode_batch", counting)
    with pytest.raises(RuntimeError, match="killed"):
        A.extract_to_dir(prompts, enc_dir, tok, model, fingerprint="fp", batch_size=32, layers="0,final")
    assert "about" in capsys.readouterr().err and not (enc_dir / "meta.json").exists()
    assert len(list((enc_dir / ".parts").rglob("part_*.npz"))) == 1
    calls.clear()
    meta = A.extract_to_dir(prompts, enc_dir, tok, model, fingerprint="fp", batch_size=32, layers="0,final")
    assert sum(calls) == 300 - 128  # the finished chunk was not redone
    assert meta["layers"] == ["h00", "final"] and meta["n"] == 300
    assert meta["poolings"] == ["eos", "mean", "slot-c1", "slot-c2", "slot-o1", "slot-o2"]
    arr = np.load(enc_dir / "final__slot-o1.npy")
    assert arr.dtype == np.float16 and arr.shape == (300, 32)
    ref = real([prompts[200]["text"]], [prompts[200]["spans"]], tok, model, layers="final",
               slot_names=["o1"])["final__slot-o1"][0]
    np.testing.assert_allclose(arr[200].astype(np.float32), ref, rtol=2e-3, atol=2e-3)
    _, ids = A.load_activations(enc_dir)
    assert ids == [p["id"] for p in prompts]
    assert not (enc_dir / ".parts").exists()
    calls.clear()
    again = A.extract_to_dir(prompts, enc_dir, tok, model, fingerprint="fp", batch_size=32, layers="0,final")
    assert calls == [] and again == json.loads((enc_dir / "meta.json").read_text())
    with pytest.raises(AuditError, match="--poolings: unknown"):
        A.extract_to_dir(prompts, enc_dir, tok, model, fingerprint="fp", poolings=("max",))


def test_slot_spans_of_expanded_suite_records_hit_their_words(encoders, tmp_path):
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
    for name in ("text_encoder", "text_encoder_3"):
        tok, _ = encoders[name]
        for r in records:
            enc = tok(r["text"], return_offsets_mapping=True)
            slots = A.token_slots(enc["offset_mapping"], r["spans"], list(r["slots"]))
            assert set(slots) == set(r["slots"])
            off = enc["offset_mapping"]
            for slot, idx in slots.items():
                assert idx == list(range(idx[0], idx[-1] + 1))  # contiguous tokens
                assert r["text"][off[idx[0]][0]:off[idx[-1]][1]].strip() == r["slots"][slot]
                outside = [i for i in range(len(off)) if i not in idx and off[i][1] > off[i][0]]
                assert not any(r["spans"][slot][0] <= off[i][0] < r["spans"][slot][1] for i in outside)
