"""Tiny text encoders built from configs (random weights) in a pipeline-like folder.

Used when ``t2i_audit.tiny`` / ``t2i_audit.models`` are not available; they mirror the layout
of a diffusers pipeline folder: ``tokenizer/`` + ``text_encoder/`` (CLIP), optionally
``tokenizer_3/`` + ``text_encoder_3/`` (T5).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

WORDS = ("a photo of an and the red green blue yellow purple orange black white cube sphere "
         "cone mouse dog cat bird car cup to left right above below on top next two three").split()


def _clip_vocab(n_merges: int = 800):
    import open_clip

    path = os.path.join(os.path.dirname(open_clip.__file__), "bpe_simple_vocab_16e6.txt.gz")
    merges = gzip.open(path).read().decode("utf-8").split("\n")[1 : 49152 - 256 - 2 + 1]
    merges = [tuple(m.split()) for m in merges[:n_merges]]
    from open_clip.tokenizer import bytes_to_unicode

    base = list(bytes_to_unicode().values())
    vocab = base + [v + "</w>" for v in base] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    return {t: i for i, t in enumerate(vocab)}, merges


def build_tiny_clip(folder: Path, *, layers: int = 3, hidden: int = 32, seed: int = 0,
                    tok_sub: str = "tokenizer", enc_sub: str = "text_encoder") -> Path:
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = Path(folder)
    vocab, merges = _clip_vocab()
    tok = CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)
    tok.save_pretrained(folder / tok_sub)
    torch.manual_seed(seed)
    cfg = CLIPTextConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4,
                         max_position_embeddings=77, projection_dim=hidden,
                         bos_token_id=vocab["<|startoftext|>"], eos_token_id=vocab["<|endoftext|>"],
                         pad_token_id=vocab["<|endoftext|>"])
    CLIPTextModel(cfg).eval().save_pretrained(folder / enc_sub)
    return folder


def build_tiny_t5(folder: Path, *, layers: int = 2, d_model: int = 16, seed: int = 0,
                  tok_sub: str = "tokenizer_3", enc_sub: str = "text_encoder_3") -> Path:
    import torch
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    folder = Path(folder)
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    pieces += [("\u2581" + w, -float(i)) for i, w in enumerate(WORDS)]
    pieces += [(c, -100.0) for c in "abcdefghijklmnopqrstuvwxyz"]
    tok = T5Tokenizer(vocab=pieces, extra_ids=0)
    tok.save_pretrained(folder / tok_sub)
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=len(pieces), d_model=d_model, d_kv=8, d_ff=2 * d_model,
                   num_layers=layers, num_heads=2, pad_token_id=0, eos_token_id=1)
    T5EncoderModel(cfg).eval().save_pretrained(folder / enc_sub)
    return folder


def write_model_index(folder: Path, encoders: list[str]) -> None:
    idx = {"_class_name": "StableDiffusionPipeline"}
    for e in encoders:
        idx[e] = ["transformers", "CLIPTextModel"]
    (Path(folder) / "model_index.json").write_text(json.dumps(idx))
