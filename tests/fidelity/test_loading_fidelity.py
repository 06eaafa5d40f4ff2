"""Loading as the real checkpoints need it: a SentencePiece-only T5 tokenizer folder (PixArt-Σ's
layout), and a VAE that must decode in float32 whatever the pipeline's dtype."""

from __future__ import annotations

import io
import json
import shutil

import numpy as np
import torch

from t2i_audit.generate import load_pipeline
from t2i_audit.models import resolve_model

WORDS = ("a photo of red green blue yellow cube sphere dog cat cup to the left right of above below "
         "and three two on table purple").split()


def _spiece_only_pixart(tmp_path):
    """tiny-pixart with its tokenizer folder replaced by spiece.model + a config (no tokenizer.json)."""
    import sentencepiece as spm

    src = resolve_model("tiny-pixart").pretrained_path()
    folder = tmp_path / "pixart-spiece"
    shutil.copytree(src, folder)
    model = io.BytesIO()
    sentences = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))] * 20
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, vocab_size=48,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   minloglevel=2)
    tok_dir = folder / "tokenizer"
    shutil.rmtree(tok_dir)
    tok_dir.mkdir()
    (tok_dir / "spiece.model").write_bytes(model.getvalue())
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "T5Tokenizer", "extra_ids": 0, "model_max_length": 512,
         "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}))
    return folder


def test_spiece_only_tokenizer_folder_loads_and_runs(tmp_path):
    """PixArt-Σ ships its T5 tokenizer as spiece.model only: transformers 5 converts it with
    sentencepiece + protobuf (core dependencies), through our real loading paths."""
    import sentencepiece as spm

    from t2i_audit.probes.capture.pipeline_text import PipelineTextEncoder, load_text_pipeline

    folder = _spiece_only_pixart(tmp_path)
    card = resolve_model(str(folder))
    pipe = load_pipeline(card, "cpu", "float32")
    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer" / "spiece.model"))
    text = "a red cube to the left of a blue sphere"
    assert pipe.tokenizer(text)["input_ids"] == sp.encode(text) + [1]  # + </s>
    out = pipe(prompt=[text], num_inference_steps=1, height=32, width=32, output_type="np",
               use_resolution_binning=False, generator=torch.Generator("cpu").manual_seed(0))
    assert out.images.shape == (1, 32, 32, 3) and np.isfinite(out.images).all()
    res = PipelineTextEncoder(load_text_pipeline(str(folder)), {"clean_caption": False}).encode(
        [text], [{"c1": (2, 5)}], layers="conditioning", slot_names=["c1"])["text_encoder"]
    assert res["_info"]["sequence_length"] == 300 and np.isfinite(res["h02__slot-c1"]).all()


def test_pixart_vae_decodes_in_float32_under_half_precision():
    card = resolve_model("tiny-pixart")
    assert card.vae_dtype == "float32" and resolve_model("pixart-sigma").vae_dtype == "float32"
    pipe = load_pipeline(card, "cpu", "bfloat16")
    assert pipe.transformer.dtype == torch.bfloat16 and pipe.vae.dtype == torch.float32
    seen = []
    h = pipe.vae.decoder.register_forward_pre_hook(lambda _m, args: seen.append(args[0].dtype))
    out = pipe(prompt=["a red cube"], num_inference_steps=1, height=32, width=32, output_type="np",
               generator=torch.Generator("cpu").manual_seed(0), **card.call)
    h.remove()
    assert seen == [torch.float32] and np.isfinite(out.images).all()
