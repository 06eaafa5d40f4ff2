"""A tiny random-weight text LLM of Qwen3's kind (``Qwen3ForCausalLM`` + Qwen3's chat template with
``enable_thinking``), built offline from a config: the twin of the question-generator cards
(cards/questioners.yaml, ``model.id: "tiny:llm"``). It loads through the same
``AutoModelForCausalLM`` / ``AutoTokenizer`` path as Qwen/Qwen3-8B. Random weights write garbage,
which is what it is for: it proves the import survives an LLM whose output does not parse."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

VERSION = "v1"


def build(folder: Path) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from .tokenizers import qwen3_tokenizer

    tok = qwen3_tokenizer()
    tok.eos_token = "<|im_end|>"  # Qwen3 instruct models end a turn with <|im_end|>; <|endoftext|> pads
    tok.pad_token = "<|endoftext|>"
    ids = tok.convert_tokens_to_ids
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=8192,
                      bos_token_id=None, eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>"),
                      tie_word_embeddings=True)
    model = Qwen3ForCausalLM(cfg)
    model.generation_config.eos_token_id = cfg.eos_token_id
    model.generation_config.pad_token_id = cfg.pad_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


def materialize(root: Path | None = None) -> dict:
    """Build once (atomically, as tiny/scorers.py) and return the card's ``model`` section."""
    root = Path(root or os.environ.get("T2I_AUDIT_TINY_DIR") or Path.home() / ".cache" / "t2i_audit" / "tiny-scorers")
    folder = root / f"llm-{VERSION}"
    done = folder / "model.json"
    if done.exists():
        return json.loads(done.read_text())
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".llm.", dir=root))
    try:
        build(tmp / "m")
        try:
            os.replace(tmp / "m", folder)
        except OSError:  # built concurrently by another process: use theirs
            if not done.exists():
                raise
        cfg = {"id": str(folder), "local": True, "revision": f"tiny-random-{VERSION}"}
        if not done.exists():
            done.write_text(json.dumps(cfg))
        return json.loads(done.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
