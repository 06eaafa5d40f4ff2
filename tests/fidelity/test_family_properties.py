"""Properties every family of the harness gets without a line of its own.

* **Batch independence, measured.** A prompt's image and its stored text states are compared made
  alone and made beside a longer prompt. A family whose image moves must say ``batch_dependent``
  in families.yaml (generate then makes its images one at a time and text extraction encodes one
  prompt at a time), and a family that says so must really move — the flag is a measurement, not
  a guess. Kernel rounding for another batch size is ~1e-7 here; padding the denoiser sees
  unmasked moves an image by ~1e-3 (CogView 4: 2.7e-3, Kandinsky 5: 1.2e-2), hence ``MOVED``.
* **Hostile prompts through every stage a family has.** Apostrophes and double quotes (HunyuanImage
  runs ByT5 per quoted span), accents, CJK, right-to-left script, emoji, one word, a prompt far past
  every encoder's maximum length, two identical prompts in one batch: every stored text array is
  finite, truncation is recorded for the long prompt only, identical prompts get identical states,
  and the hooked denoiser replay gives finite activations and images.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t2i_audit.families import pipeline_family
from t2i_audit.generate import load_pipeline
from t2i_audit.models import resolve_model
from t2i_audit.probes.capture.denoiser import run_hooked
from t2i_audit.probes.capture.pipeline_text import PipelineTextEncoder

from .harness import FAMILIES

MOVED = 1e-4  # max |Δ| above which an output depends on its batch-mates
SIZE = lambda family: FAMILIES[family].get("run", {}).get("size", 32)  # noqa: E731

ALONE = "a red cube"
BESIDE = "three green dogs and a purple cup on a wooden table next to a very tall yellow lamp in a room"
LONG = " ".join(["a red cube to the left of a blue sphere"] * 150)  # ~1,400 tokens: past every encoder
HOSTILE = [
    "a dog's bone and a cat's toy",
    'a sign that says "hello" above a red cube',
    "un café crème à côté d'une crêpe",
    "一只红色的猫坐在蓝色的盒子上",
    "قطة حمراء بجانب صندوق أزرق",
    "a 🐱 next to a 🍎",
    "cube",
    LONG,
    "a blue sphere",
    "a blue sphere",
]


@pytest.fixture(scope="module")
def pipes():
    torch.set_num_threads(1)
    cache: dict = {}

    def get(family):
        if family not in cache:
            cache.clear()  # one family's pipeline in memory at a time
            card = resolve_model(family)
            cache[family] = (card, load_pipeline(card, "cpu", "float32"))
        return cache[family]

    return get


def _images(pipe, card, texts, family):
    _, info = run_hooked(pipe, texts, [7 + i for i in range(len(texts))], steps=2, guidance=4.0,
                         size=SIZE(family), call_kwargs=card.call, at_steps=[-1], output_type="np")
    return np.asarray(info["images"], dtype=np.float64)


def _text(pipe, card, texts):
    out = PipelineTextEncoder(pipe, card.call).encode(texts, [{}] * len(texts), poolings=("eos", "mean"))
    return {enc: {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items() if not k.startswith("_")}
            for enc, arrays in out.items()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_batch_dependence_is_measured_and_declared(pipes, family):
    card, pipe = pipes(family)
    declared = bool((pipeline_family(type(pipe).__name__) or {}).get("batch_dependent"))
    image_moved = float(np.abs(_images(pipe, card, [ALONE], family)[0]
                               - _images(pipe, card, [ALONE, BESIDE], family)[0]).max())
    alone, beside = _text(pipe, card, [ALONE]), _text(pipe, card, [ALONE, BESIDE])
    text_moved = max(float(np.abs(alone[e][k][0] - beside[e][k][0]).max()) for e in alone for k in alone[e])
    assert (image_moved > MOVED) == declared, (
        f"{type(pipe).__name__}: an image moves by {image_moved:.2e} beside another prompt; families.yaml "
        f"says batch_dependent={declared}")
    if text_moved > MOVED:  # states that move with the batch condition images that move with it
        assert declared, f"{type(pipe).__name__}: text states move by {text_moved:.2e} with the batch"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_hostile_prompts_through_text_and_denoiser(pipes, family):
    card, pipe = pipes(family)
    dependent = bool((pipeline_family(type(pipe).__name__) or {}).get("batch_dependent"))
    out = PipelineTextEncoder(pipe, card.call).encode(HOSTILE, [{}] * len(HOSTILE), poolings=("eos", "mean"))
    assert out, f"{family}: no encoder ran"
    truncated_by = set()
    for enc, arrays in out.items():
        for name, arr in arrays.items():
            if name.startswith("_"):
                continue
            arr = np.asarray(arr, dtype=np.float64)
            assert arr.shape[0] == len(HOSTILE) and np.isfinite(arr).all(), f"{family} {enc} {name}: not finite"
            if not dependent:  # two identical prompts in one batch: identical states
                np.testing.assert_allclose(arr[-1], arr[-2], atol=1e-6, err_msg=f"{family} {enc} {name}")
        flags = list(np.asarray(arrays["_truncated"]))
        assert not any(flags[:7] + flags[8:]), f"{family} {enc}: a short prompt is marked truncated: {flags}"
        if flags[7]:
            truncated_by.add(enc)
    assert truncated_by, f"{family}: the {len(LONG.split())}-word prompt is not recorded as truncated"
    acts, info = run_hooked(pipe, HOSTILE, list(range(len(HOSTILE))), steps=1, guidance=4.0, size=SIZE(family),
                            call_kwargs=card.call, at_steps=[0], output_type="np")
    assert acts and all(np.isfinite(v).all() and len(v) == len(HOSTILE) for v in acts.values())
    assert np.isfinite(np.asarray(info["images"], dtype=np.float64)).all()
