"""A small CLIP BPE tokenizer for the mini generator, cut from open_clip's bundled vocabulary.

Only the merges that the full CLIP BPE applies to the mini world's words are kept (in their
original order), so those words tokenize exactly as under the full tokenizer, into the same
pieces; any other word falls back to byte-level pieces. Vocabulary: 512 byte tokens, the kept
merges, and the two special tokens (a few hundred ids instead of 49,408).
"""

from __future__ import annotations

import gzip
import os
from functools import lru_cache
from pathlib import Path

from ..clip_bpe import bytes_to_unicode
from .world import COLORS, RELATIONS, SHAPES

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
EXTRA_WORDS = ("a", "an", "and", "the", "of", "to", "photo", "image", "picture", "with", "on", "white",
               "background", "is", "there", "two", "three", "one", "shape", "shapes", "left", "right",
               "above", "below", "next")


def _bpe_file() -> str:
    from ..clip_bpe import BPE_PATH  # vendored copy of open_clip's file: no open_clip needed

    return os.fspath(BPE_PATH)


@lru_cache(maxsize=1)
def _full_merges() -> list[tuple[str, str]]:
    lines = gzip.open(_bpe_file()).read().decode("utf-8").split("\n")[1 : 49152 - 256 - 2 + 1]
    return [tuple(line.split()) for line in lines]


def _used_merges(word: str, ranks: dict[tuple[str, str], int]) -> list[int]:
    """Ranks of the merges full CLIP BPE applies to `word` (its '</w>'-terminated form)."""
    benc = bytes_to_unicode()
    chars = [benc[b] for b in word.encode("utf-8")]
    parts = chars[:-1] + [chars[-1] + "</w>"]
    used = []
    while len(parts) > 1:
        pairs = [(parts[i], parts[i + 1]) for i in range(len(parts) - 1)]
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if best not in ranks:
            break
        used.append(ranks[best])
        merged, i = [], 0
        while i < len(parts):
            if i < len(parts) - 1 and (parts[i], parts[i + 1]) == best:
                merged.append(parts[i] + parts[i + 1])
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return used


def mini_words() -> list[str]:
    # plurals as shape + "s" ("crosss"): a frozen vocabulary choice, so that the shipped
    # tokenizer stays exactly what build_tokenizer() makes ("crosses" still tokenizes, in pieces)
    words = set(EXTRA_WORDS) | set(COLORS) | set(SHAPES) | {s + "s" for s in SHAPES}
    for name, (text, inv) in RELATIONS.items():
        words |= set(text.split()) | set(name.split())
    return sorted(words)


def vocab_and_merges(words: list[str] | None = None) -> tuple[dict[str, int], list[tuple[str, str]]]:
    merges = _full_merges()
    ranks = {m: i for i, m in enumerate(merges)}
    keep = sorted({r for w in (words or mini_words()) for r in _used_merges(w, ranks)})
    kept = [merges[r] for r in keep]
    byte_tokens = list(bytes_to_unicode().values())
    tokens = byte_tokens + [t + "</w>" for t in byte_tokens] + ["".join(m) for m in kept] + [BOS, EOS]
    vocab = {t: i for i, t in enumerate(tokens)}
    return vocab, [tuple(m) for m in kept]


def build_tokenizer(model_max_length: int = 77):
    """A transformers CLIPTokenizer over the mini vocabulary (pad = eos, as SD 1.x)."""
    from transformers import CLIPTokenizer

    vocab, merges = vocab_and_merges()
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=model_max_length,
                         bos_token=BOS, eos_token=EOS, unk_token=EOS, pad_token=EOS)


def save_tokenizer(tokenizer, folder: Path) -> None:
    """save_pretrained without the redundant tokenizer.json (vocab.json + merges.txt suffice)."""
    import json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(folder))
    (folder / "tokenizer.json").unlink(missing_ok=True)
    vocab, merges = vocab_and_merges()
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    lines = ["#version: 0.2"] + [" ".join(m) for m in merges]
    (folder / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
