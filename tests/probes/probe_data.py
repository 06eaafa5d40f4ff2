from __future__ import annotations

import hashlib
import itertools
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

COLORS = ["red", "green", "blue", "yellow", "purple", "orange"]
OBJECTS = ["cube", "sphere", "cone", "dog", "cat", "cup"]


def make_prompt(c1: str, o1: str, c2: str, o2: str) -> dict:
    """A PromptRecord (docs/records.md) for 'a photo of a {c1} {o1} and a {c2} {o2}'."""
    parts = ["a photo of a ", c1, " ", o1, " and a ", c2, " ", o2]
    text, spans, pos = "", {}, 0
    names = [None, "c1", None, "o1", None, "c2", None, "o2"]
    for name, part in zip(names, parts):
        if name:
            spans[name] = [pos, pos + len(part)]
        text += part
        pos += len(part)
    slots = {"c1": c1, "o1": o1, "c2": c2, "o2": o2}
    comp = "|".join(f"{k}={v}" for k, v in sorted(slots.items()))
    return {
        "id": "p" + hashlib.sha1(comp.encode()).hexdigest()[:12], "suite": "colors", "suite_version": "1",
        "template": "two_object", "category": "color_binding", "text": text, "slots": slots,
        "families": {"c1": "color", "o1": "object", "c2": "color", "o2": "object"}, "spans": spans,
        "objects": [], "relations": [], "questions": [], "composition": comp,
        "bindings": [["color", c1, o1], ["color", c2, o2]], "split": "train",
        "twin": None, "twin_id": None, "twin_swap": None,
    }


def make_prompts(n: int | None = None, seed: int = 0) -> list[dict]:
    import random

    combos = [c for c in itertools.product(COLORS, OBJECTS, COLORS, OBJECTS) if c[0] != c[2] and c[1] != c[3]]
    random.Random(seed).shuffle(combos)
    return [make_prompt(*c) for c in combos[: n or len(combos)]]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A pipeline-like folder with a tiny CLIP (tokenizer/, text_encoder/) and a tiny T5."""
    from tiny_encoders import build_tiny_clip, build_tiny_t5

    import torch

    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("tiny-model")
    build_tiny_clip(d)
    build_tiny_t5(d)
    return d


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory) -> Path:
    """A local diffusers pipeline folder whose only text encoder is a tiny CLIP (the tiny-sd pipeline):
    text activations come from the pipeline's own encode_prompt, so a bare encoder folder is not enough."""
    from t2i_audit.tiny import materialize

    import torch

    torch.set_num_threads(1)
    return materialize("tiny-sd")
