"""Tiny offline pipelines: build, reload through the real loading path, generate, determinism."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import pytest

from t2i_audit import tiny
from t2i_audit.errors import AuditError

NAMES = sorted(tiny.TINY_MODELS)
# HiDreamImagePipeline.__call__ rescales any size to the area of default_sample_size (128) latents, and
# Kandinsky5T2IPipeline.__call__ snaps it to its resolutions (1024 px = 128 latents): 256 px here (2x VAEs)
RESCALED = {"tiny-hidream": 256, "tiny-kandinsky5": 256}
PROMPT = "a red cube left of a blue sphere"
PROMPTS = [PROMPT, "three green cats above a yellow dog"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tiny-cache")


@pytest.fixture(scope="module")
def pipes(root):
    import torch
    from diffusers import DiffusionPipeline
    from diffusers.utils import logging

    torch.set_num_threads(1)
    logging.disable_progress_bar()
    out = {}
    for name in NAMES:
        pipe = DiffusionPipeline.from_pretrained(tiny.materialize(name, root))
        pipe.set_progress_bar_config(disable=True)
        out[name] = pipe
    return out


def generate(name, pipe, prompts, seeds, output="uint8"):
    import torch

    from t2i_audit.families import pipeline_family
    from t2i_audit.generate import output_images

    card = tiny.TINY_MODELS[name]
    d = card["defaults"]
    images = pipe(
        # Flux2Pipeline's first parameter is `image`; a copy: ZImagePipeline._encode_prompt templates the list in place
        prompt=list(prompts),
        generator=[torch.Generator("cpu").manual_seed(s) for s in seeds],
        num_inference_steps=d["steps"],
        # HunyuanImagePipeline.__call__ has no guidance_scale: families.yaml guidance_arg names where guidance goes
        **{(pipeline_family(card["pipeline"]) or {}).get("guidance_arg", "guidance_scale"): d["guidance"]},
        height=d["size"],
        width=d["size"],
        output_type="np",
        **card["call"],
    )
    images = output_images(images)  # .images, or Kandinsky5T2IPipeline's .image
    return (images * 255).round().astype(np.uint8) if output == "uint8" else images


def test_cards_have_the_documented_shape():
    assert NAMES == ["tiny-chroma", "tiny-cogview4", "tiny-flux", "tiny-flux2", "tiny-flux2-klein", "tiny-hidream",
                     "tiny-hunyuan-image", "tiny-kandinsky5", "tiny-lumina2",
                     "tiny-pixart", "tiny-qwen-image", "tiny-sana", "tiny-sana-sprint", "tiny-sd", "tiny-sd3",
                     "tiny-sdxl", "tiny-z-image"]
    for card in tiny.TINY_MODELS.values():
        assert set(card["defaults"]) >= {"steps", "guidance", "size", "dtype"}
        assert card["defaults"]["size"] in (32, 64) and card["defaults"]["steps"] <= 4
        assert all(set(te) == {"name", "tokenizer", "kind"} for te in card["text_encoders"])


@pytest.mark.parametrize("name", NAMES)
def test_reloads_into_the_right_class_and_generates(name, pipes, root):
    card = tiny.TINY_MODELS[name]
    pipe = pipes[name]
    assert type(pipe).__name__ == card["pipeline"]
    for te in card["text_encoders"]:
        encoder = getattr(pipe, te["name"])
        want = {"t5": "T5EncoderModel", "clip": "CLIPTextModel", "gemma2": "Gemma2Model",
                "qwen2.5-vl": "Qwen2_5_VLForConditionalGeneration", "glm": "GlmModel",
                "qwen3": ("Qwen3Model", "Qwen3ForCausalLM"),  # Z-Image: the model; FLUX.2 [klein]: the causal LM
                "mistral3": "Mistral3ForConditionalGeneration", "llama": "LlamaForCausalLM"}[te["kind"]]
        assert type(encoder).__name__.startswith(want)
        assert getattr(pipe, te["tokenizer"]) is not None
    image = generate(name, pipe, [PROMPT], [0])
    size = RESCALED.get(name, card["defaults"]["size"])
    assert image.shape == (1, size, size, 3)
    assert image.std() > 1.0  # random weights give noise, never a constant (black or NaN) image
    folder = tiny.materialize(name, root)
    assert folder.name == f"{name}-{tiny.fingerprint(name)}"
    assert (folder / "model_index.json").is_file() and (folder / "tiny.json").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_bytes_and_other_seed_differs(name, pipes):
    a = generate(name, pipes[name], [PROMPT], [7])
    b = generate(name, pipes[name], [PROMPT], [7])
    c = generate(name, pipes[name], [PROMPT], [8])
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()


@pytest.mark.parametrize("name", NAMES)
def test_prompt_changes_the_image(name, pipes):
    a = generate(name, pipes[name], [PROMPT], [3], output="float")
    b = generate(name, pipes[name], ["a blue cube left of a red sphere"], [3], output="float")
    assert np.abs(a - b).max() > 1e-4


def test_build_is_deterministic_across_roots(root, tmp_path):
    for name in ("tiny-sd", "tiny-sd3"):
        a, b = tiny.materialize(name, root), tiny.materialize(name, tmp_path)
        weights = sorted(p.relative_to(a) for p in a.rglob("*.safetensors"))
        assert weights, "no weight files written"
        for rel in weights:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_materialize_twice_returns_existing_folder_without_rebuilding(root, monkeypatch):
    first = tiny.materialize("tiny-flux", root)
    stamp = (first / "model_index.json").stat().st_mtime_ns

    def no_build(*a, **k):
        raise AssertionError("rebuilt")

    monkeypatch.setattr(tiny, "_build_pipeline", no_build)
    assert tiny.materialize("tiny-flux", root) == first
    assert (first / "model_index.json").stat().st_mtime_ns == stamp


def test_failed_build_leaves_no_folder(tmp_path, monkeypatch):
    real = tiny._build_pipeline

    def broken(name, card):
        pipe = real(name, card)

        def save(path, **kw):
            (Path(path) / "model_index.json").write_text("{}")  # half-written, then killed
            raise KeyboardInterrupt

        pipe.save_pretrained = save
        return pipe

    monkeypatch.setattr(tiny, "_build_pipeline", broken)
    with pytest.raises(KeyboardInterrupt):
        tiny.materialize("tiny-pixart", tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(tiny, "_build_pipeline", real)
    assert (tiny.materialize("tiny-pixart", tmp_path) / "model_index.json").is_file()


def test_default_root_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("T2I_AUDIT_CACHE", str(tmp_path / "c"))
    assert tiny.default_root() == tmp_path / "c"
    monkeypatch.delenv("T2I_AUDIT_CACHE")
    assert tiny.default_root() == Path.home() / ".cache" / "t2i-audit" / "tiny"


@pytest.mark.parametrize("make", [tiny.clip_tokenizer, tiny.t5_tokenizer])
def test_tokenizers_know_english_words(make):
    tok = make()
    red, blue = (tok(w, add_special_tokens=False).input_ids for w in ("red", "blue"))
    assert len(red) == 1 and len(blue) == 1 and red != blue
    ids = tok(PROMPT, add_special_tokens=False).input_ids
    assert tok.unk_token_id not in ids
    assert len(ids) <= 10  # words, not characters


def test_reloaded_tokenizers_match_the_built_ones(pipes):
    from t2i_audit.tiny import tokenizers as tiny_tokenizers

    built = {"clip": tiny.clip_tokenizer(), "t5": tiny.t5_tokenizer(), "qwen2.5-vl": tiny_tokenizers.qwen_tokenizer(),
             "gemma2": tiny_tokenizers.gemma_tokenizer(), "glm": tiny_tokenizers.glm_tokenizer(),
             "qwen3": tiny_tokenizers.qwen3_tokenizer(),
             "mistral3": tiny_tokenizers.mistral3_processor().tokenizer, "llama": tiny_tokenizers.llama3_tokenizer()}
    from transformers import ByT5Tokenizer

    # same kind, vocabulary also trained on the pipeline's own template (its 40-token prefix); HunyuanImage's
    # glyph encoder is a T5EncoderModel (kind t5) with ByT5's byte tokenizer
    own = {("tiny-kandinsky5", "text_encoder"): tiny_tokenizers.kandinsky5_qwen_tokenizer(),
           ("tiny-hunyuan-image", "text_encoder_2"): ByT5Tokenizer()}
    max_length = {"clip": 77, "t5": 512, "qwen2.5-vl": 32768, "gemma2": 8192, "glm": 128000, "qwen3": 32768,
                  "mistral3": 131072, "llama": 131072}
    for name, pipe in pipes.items():
        for te in tiny.TINY_MODELS[name]["text_encoders"]:
            loaded = getattr(pipe, te["tokenizer"])
            loaded = getattr(loaded, "tokenizer", loaded)  # FLUX.2: a PixtralProcessor around the tokenizer
            want = own.get((name, te["name"]), built[te["kind"]])
            assert loaded(PROMPT).input_ids == want(PROMPT).input_ids, (name, te)
            assert loaded.model_max_length == (want.model_max_length if (name, te["name"]) in own
                                               else max_length[te["kind"]])


def test_unknown_name_suggests_the_close_one(tmp_path):
    with pytest.raises(AuditError) as err:
        tiny.materialize("tiny-sdx", tmp_path)
    msg = str(err.value)
    assert "Unknown tiny model 'tiny-sdx'" in msg and "Did you mean 'tiny-sdxl'" in msg
    assert "tiny-pixart" in msg  # lists the known names
    assert list(tmp_path.iterdir()) == []


def test_import_stays_light():
    code = "import sys, t2i_audit.tiny; print([m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "[]"
