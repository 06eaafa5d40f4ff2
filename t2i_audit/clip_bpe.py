"""CLIP's BPE vocabulary, vendored (t2i_audit/data/bpe_simple_vocab_16e6.txt.gz, MIT, OpenAI).

The tiny offline tokenizers (t2i_audit/tiny/, t2i_audit/mini/tokenizer.py) are cut from it. It
is byte-identical to the copy in open_clip_torch's wheel (tests/test_install.py checks this when
open_clip is installed), so the core install builds them without open_clip and torchvision.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

BPE_PATH = Path(__file__).with_name("data") / "bpe_simple_vocab_16e6.txt.gz"


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """Byte -> printable character map of GPT-2/CLIP BPE (as open_clip/tokenizer.py:bytes_to_unicode)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))
