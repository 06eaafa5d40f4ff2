"""A scanned trajectory continued from its latents equals the uninterrupted one (same batch composition),
on the mini generator (DDIM, v-prediction), the SDXL twin (Euler: init_noise_sigma ≠ 1, a step index) and
the SD twin under a stochastic sampler (Euler ancestral: the generators draw every step) and a multistep one
(PNDM: per-image history in the scheduler)."""

from __future__ import annotations

import numpy as np
import pytest

from t2i_audit.errors import AuditError
from t2i_audit.select.continuation import Snapshot, continue_batch, snapshot_maker

TEXTS = ["a red circle to the left of a blue square", "a green triangle", "a yellow cross and a purple circle"]
SEEDS = [11, 22, 33]
STEPS = 6


def _pipe(name: str, scheduler: str | None = None):
    from t2i_audit.generate import load_pipeline
    from t2i_audit.models import resolve_model

    card = resolve_model(name)
    pipe = load_pipeline(card, "cpu", "float32")
    if scheduler:
        import diffusers

        pipe.scheduler = getattr(diffusers, scheduler).from_config(pipe.scheduler.config)
    return pipe, card


def _whole(pipe, card, texts, seeds, size):
    import torch

    from t2i_audit.generate import output_images, pipeline_call_kwargs

    gens = [torch.Generator("cpu").manual_seed(s) for s in seeds]
    kwargs, _ = pipeline_call_kwargs(type(pipe), texts, gens, steps=STEPS, guidance=card.defaults["guidance"],
                                     size=size, output_type="np", call=card.call)
    return np.stack(output_images(pipe(**kwargs)))


def _scan(pipe, card, texts, seeds, size, step) -> Snapshot:
    from t2i_audit.probes.capture.denoiser import run_hooked

    holder: dict = {}
    run_hooked(pipe, texts, seeds, steps=STEPS, guidance=card.defaults["guidance"], size=size, at_steps=[step],
               call_kwargs=card.call, attach=[snapshot_maker(step, holder)], stop_after=step)
    return holder["snap"].snapshot


def _continue(pipe, card, texts, snap, size):
    return np.stack(continue_batch(pipe, texts, snap, steps=STEPS, guidance=card.defaults["guidance"], size=size,
                                   call=card.call))


@pytest.mark.parametrize("name,scheduler,size", [
    ("mini", None, 32),
    ("tiny-sdxl", None, 32),
    ("tiny-sd", "EulerAncestralDiscreteScheduler", 32),
    ("tiny-sd", "PNDMScheduler", 32),
])
def test_continued_equals_uninterrupted(name, scheduler, size):
    pipe, card = _pipe(name, scheduler)
    whole = _whole(pipe, card, TEXTS, SEEDS, size)
    for step in (0, 2, STEPS - 1):  # the last: nothing left to run, the snapshot is only decoded (select --at 1.0)
        snap = _scan(pipe, card, TEXTS, SEEDS, size, step)
        assert snap is not None and snap.step == step
        cont = _continue(pipe, card, TEXTS, snap, size)
        assert cont.shape == whole.shape
        assert np.array_equal(cont, whole), f"{name}/{scheduler} continued from step {step} differs"
    # the pipeline is left as it was: a plain call makes the same images again
    assert np.array_equal(_whole(pipe, card, TEXTS, SEEDS, size), whole)


def test_rows_regrouped_into_the_same_batch_are_unchanged():
    """Rows taken apart and put back in the same order (PNDM: its history is per row) continue to the same
    bytes; the per-row state follows its row."""
    pipe, card = _pipe("tiny-sd", "PNDMScheduler")
    snap = _scan(pipe, card, TEXTS, SEEDS, 32, 2)
    whole = _continue(pipe, card, TEXTS, snap, 32)
    again = Snapshot.concat([snap.rows([0, 1]), snap.rows([2])])
    assert np.array_equal(_continue(pipe, card, TEXTS, again, 32), whole)
    ets = snap.scheduler["ets"]
    assert ets and all(e.shape[0] == 3 for e in ets)
    assert all(np.array_equal(a.numpy(), b[[2]].numpy()) for a, b in zip(snap.rows([2]).scheduler["ets"], ets))


def test_a_snapshot_from_another_schedule_is_refused():
    pipe, card = _pipe("mini")
    snap = _scan(pipe, card, TEXTS[:1], SEEDS[:1], 32, 1)
    with pytest.raises(AuditError, match="schedule differs"):
        continue_batch(pipe, TEXTS[:1], snap, steps=STEPS + 2, guidance=7.0, size=32, call=card.call)
    with pytest.raises(AuditError, match="2 prompts for a snapshot of 1 rows"):
        continue_batch(pipe, TEXTS[:2], snap, steps=STEPS, guidance=7.0, size=32, call=card.call)
