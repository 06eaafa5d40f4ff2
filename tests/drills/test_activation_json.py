"""The text-encoder extraction's JSON files, damaged: its own cache index (meta.json, a part
folder's info.json) is extracted again; a file someone hands us (a model folder's config.json)
or a reader outside the stage (load_activations) gives a located error, never a traceback."""

import json
import shutil

import pytest

from t2i_audit.errors import AuditError
from t2i_audit.probes.capture import activations as A
from t2i_audit.probes.capture import pipeline_text as PT

PROMPTS = [{"id": f"p{i}", "text": f"a photo of {n} {o}"}
           for i, (n, o) in enumerate([("a red", "cup"), ("a blue", "dog"), ("two", "apples"), ("a green", "car"),
                                       ("a big", "cat")])]
KW = dict(layers="final", poolings=("eos",), batch_size=2, progress=False)


@pytest.fixture
def encodes(monkeypatch):
    """How many prompts went through the encoder."""
    seen = []
    real = PT.PipelineTextEncoder.encode

    def counting(self, texts, *a, **k):
        seen.append(len(texts))
        return real(self, texts, *a, **k)

    monkeypatch.setattr(PT.PipelineTextEncoder, "encode", counting)
    return seen


@pytest.mark.parametrize("damage", ["{", "[]", ""])
def test_damaged_meta_json_is_extracted_again(tmp_path, encodes, damage):
    out = tmp_path / "activations"
    meta = A.extract_text_activations(PROMPTS, out, "tiny-sd", **KW)["text_encoder"]
    good = (out / "text_encoder" / "meta.json").read_bytes()
    (out / "text_encoder" / "meta.json").write_text(damage)
    encodes.clear()
    assert A.extract_text_activations(PROMPTS, out, "tiny-sd", **KW)["text_encoder"] == meta
    assert sum(encodes) == len(PROMPTS) and (out / "text_encoder" / "meta.json").read_bytes() == good


def test_damaged_part_info_json_is_encoded_again(tmp_path, encodes, monkeypatch):
    out = tmp_path / "activations"
    clean = A.extract_text_activations(PROMPTS, tmp_path / "clean", "tiny-sd", **KW)["text_encoder"]
    monkeypatch.setattr(A, "CHUNK", 2)
    real = A.save_part
    calls = {"n": 0}

    def killed_after_one_part(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(A, "save_part", killed_after_one_part)
    with pytest.raises(KeyboardInterrupt):
        A.extract_text_activations(PROMPTS, out, "tiny-sd", **KW)
    monkeypatch.setattr(A, "save_part", real)
    (info,) = (out / "text_encoder" / ".parts").rglob("info.json")
    info.write_text('{"conditioning')  # torn
    encodes.clear()
    meta = A.extract_text_activations(PROMPTS, out, "tiny-sd", **KW)["text_encoder"]
    assert sum(encodes) == len(PROMPTS)  # its parts were made again, with the info
    assert {k: v for k, v in meta.items() if k != "parts"} == {k: v for k, v in clean.items() if k != "parts"}


def test_load_activations_names_a_damaged_meta_json(tmp_path):
    out = tmp_path / "activations"
    A.extract_text_activations(PROMPTS, out, "tiny-sd", **KW)
    (out / "text_encoder" / "meta.json").write_text('{"key": ')
    with pytest.raises(AuditError, match=r"text_encoder/meta\.json: not valid JSON.*rerun `t2i-audit probe`"):
        A.load_activations(out / "text_encoder")
    (out / "text_encoder" / "meta.json").write_text("[1]")
    with pytest.raises(AuditError, match=r"meta\.json: not a JSON object"):
        A.load_activations(out / "text_encoder")


def test_a_model_folders_damaged_config_json_is_located(tmp_path):
    from t2i_audit.tiny import materialize

    model = shutil.copytree(materialize("tiny-sd"), tmp_path / "model")
    (model / "text_encoder" / "config.json").write_text('{"model_type": "clip_text_model",')
    with pytest.raises(AuditError, match=r"text_encoder/config\.json: not valid JSON"):
        A.discover_text_encoders(model)
    (model / "text_encoder" / "config.json").write_text(json.dumps(["clip"]))
    assert A.discover_text_encoders(model)[0]["kind"] == "auto"  # no model_type: the generic reader
