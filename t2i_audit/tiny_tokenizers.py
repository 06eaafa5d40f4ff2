"""Tokenizers of the LLM text encoders' *kinds*, built offline in memory (no hub): byte-level BPE
(Qwen), SentencePiece-style BPE with byte fallback (Gemma). Vocabularies are trained here on the
CLIP vocabulary's words plus the pipelines' own templates, so templates tokenize to the same number
of tokens as with the real tokenizers where the pipelines depend on it."""

from __future__ import annotations

import inspect
import json

from .tiny import clip_vocab_merges

# the CLIP vocabulary's words plus the Qwen-Image chat template, so that the template's prefix is 34 tokens
# exactly as with the real tokenizer (QwenImagePipeline drops prompt_template_encode_start_idx = 34 rows).
QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>")
_QWEN_PRETOKENIZE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                     r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def qwen_tokenizer():
    """transformers' Qwen2Tokenizer (byte-level BPE) with a vocabulary trained here, in memory."""
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import Qwen2Tokenizer

    vocab, _ = clip_vocab_merges()
    words = [t[:-4] for t in vocab if t.endswith("</w>") and t[:-4].isalpha() and t.isascii()]
    corpus = [" ".join(words[i:i + 20]) for i in range(0, len(words), 20)] + [_QWEN_TEMPLATE.format("a photo")] * 50
    bpe = Tokenizer(BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN_PRETOKENIZE), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=3000, special_tokens=list(QWEN_SPECIALS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tok = Qwen2Tokenizer(vocab=model["vocab"], merges=merges, model_max_length=32768)
    tok.add_special_tokens({"additional_special_tokens": list(QWEN_SPECIALS[1:])})
    return tok


# pipeline_qwenimage.py QwenImagePipeline.__init__: prompt_template_encode (tests pin it to the pipeline's own)
_QWEN_TEMPLATE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
                  "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
                  "<|im_end|>\n<|im_start|>assistant\n")


GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>")


def gemma_tokenizer():
    """transformers' GemmaTokenizer (SentencePiece-style BPE: spaces as "▁", byte fallback) with merges trained
    here on the CLIP vocabulary's words and Sana's complex human instruction (split at word starts while
    training, so no merge crosses a word: slot offsets stay word-aligned)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import GemmaTokenizer

    from diffusers import SanaPipeline

    instruction = inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default
    vocab, _ = clip_vocab_merges()
    words = [t[:-4] for t in vocab if t.endswith("</w>") and t[:-4].isalpha() and t.isascii()]
    corpus = [" ".join(words[i:i + 20]) for i in range(0, len(words), 20)] + ["\n".join(instruction)] * 20
    bpe = Tokenizer(BPE(byte_fallback=True, unk_token="<unk>"))
    bpe.normalizer = normalizers.Replace(" ", "\u2581")
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
    bytes_ = [f"<0x{i:02X}>" for i in range(256)]
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=3000, special_tokens=list(GEMMA_SPECIALS) + bytes_, show_progress=False))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    # add_bos_token: Gemma's tokenizer starts every sequence with <bos> (Sana keeps that row: select_index [0])
    return GemmaTokenizer(vocab=model["vocab"], merges=merges, model_max_length=8192, add_bos_token=True)
