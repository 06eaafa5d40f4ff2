"""A lab's own sampling loop as a model: ``--model python:package.module:function``, or ``api.RunConfig(model=fn)``.

The contract (README "Audit any model")::

    def sample(prompts: list[str], seeds: list[int], settings: dict) -> list:
        ...

* ``prompts``: the texts of one batch (``--batch-size`` of them; the last batch may be shorter);
* ``seeds``: one per prompt — the per-image seed ``run`` gives that prompt and sample with a diffusers pipeline
  (``generate.image_seed``), so the same run asked of any source uses the same seeds;
* ``settings``: ``{"steps", "guidance", "size"}`` as the user gave them, ``None`` where not given (use your own
  default: the run records it as your sampler's, not as a number of ours);
* returns one image per prompt, in order: a ``PIL.Image``, encoded bytes (PNG / JPEG / WebP, kept as they are), a
  NumPy array (H×W×3 or H×W, uint8, or float in [0, 1]) or a torch tensor (C×H×W or H×W×C, float in [0, 1]); or
  ``None`` where your sampler declines a prompt (a safety filter): recorded as a refusal, never as a failure.

Each batch's images are recorded as soon as the function returns them, so a killed run resumes with the images not
yet recorded. ``package.module`` is imported as Python would (the current folder first, as uvicorn's app loader
does); the function only has to be importable — no pipeline, no class to subclass.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import Callable

from ..errors import AuditError
from ..models import ModelCard
from .base import main_process_only, plan_requests, write_image
from .recording import finish_stage, pending, record_refusal

PREFIX = "python:"
# callables handed to the Python API in memory (api.RunConfig(model=fn)), by the reference that names them
REGISTERED: dict[str, Callable] = {}
SAMPLER_DEFAULT = "your sampler's own default (not given on the command line: the function gets None)"


def reference(fn: Callable) -> str:
    """``python:module:qualname`` of ``fn``, registered so that this process resolves it without an import."""
    if not callable(fn):
        raise AuditError(f"model {fn!r}: expected a card name, a reference or a callable")
    ref = f"{PREFIX}{getattr(fn, '__module__', None) or 'main'}:{getattr(fn, '__qualname__', type(fn).__name__)}"
    REGISTERED[ref] = fn
    return ref


def card_for(ref: str) -> ModelCard:
    target = ref[len(PREFIX):].strip()
    module, _, function = target.partition(":")
    if not module or not function:
        raise AuditError(f"--model {ref!r}: expected python:package.module:function")
    return ModelCard(name=target.replace(":", "."), kind="python", target=target,
                     defaults={"steps": None, "guidance": None, "size": None, "dtype": None},
                     sources={k: SAMPLER_DEFAULT for k in ("steps", "guidance", "size")},
                     notes="a lab's own sampler (python:module:function); its images carry no activations to probe")


def load(target: str) -> Callable:
    """The function ``module:function`` names (a dotted attribute path allowed after the colon)."""
    ref = PREFIX + target
    if ref in REGISTERED:
        return REGISTERED[ref]
    module_name, _, attr = target.partition(":")
    if os.getcwd() not in sys.path:  # `t2i-audit` is a console script: its sys.path[0] is not the user's folder
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise AuditError(f"--model {ref}: cannot import {module_name!r} ({e}); run from the folder that holds it "
                         "or install its package") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AuditError(f"--model {ref}: {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise AuditError(f"--model {ref}: {attr!r} is not a function")
    return obj


def check_config(card: ModelCard, cfg) -> ModelCard:
    """The function is imported before anything is written: a reference that does not import is said first."""
    load(card.target)
    return card


def _make(run, prompts, card, settings, progress) -> dict:
    from tqdm.auto import tqdm

    fn = load(card.target)
    requests = plan_requests(prompts, settings)
    todo, n_done, n_refused = pending(run, requests)
    given = {"steps": settings.steps, "guidance": settings.guidance, "size": settings.size}
    run.update_stage("generate", status="running", source=card.source, requested=len(requests), reused=n_done,
                     refused_before=n_refused, batch_size=settings.batch_size, settings_given=given)
    made = 0
    bar = tqdm(total=len(todo), desc=f"generate {card.label()}", unit="img", disable=not progress)
    step = max(1, settings.batch_size)
    for i in range(0, len(todo), step):
        batch = todo[i:i + step]
        t0 = time.perf_counter()
        try:
            images = fn([r.text for r in batch], [r.seed for r in batch], dict(given))
        except AuditError:
            raise
        except Exception as e:  # the lab's code: its own error, named with the batch it failed on
            raise AuditError(f"{card.source} raised {type(e).__name__}: {e} (batch of {len(batch)} from "
                             f"{batch[0].prompt_id!r}); finished images are recorded — rerun to resume") from e
        seconds = (time.perf_counter() - t0) / len(batch)
        images = _as_list(images, len(batch), card)
        for req, image in zip(batch, images):
            if image is None:
                record_refusal(run, card.name, req, "content_filter", "the sampler returned None for this prompt")
                continue
            image = to_image(image, card.source)  # a wrong type or shape is the sampler's bug: said, not recorded
            try:
                write_image(run, card.name, req, image, seconds=seconds,
                            where=f"{card.source}: image for {req.prompt_id} sample {req.sample}")
            except AuditError as e:  # bytes that do not decode
                record_refusal(run, card.name, req, "not_an_image", str(e))
                continue
            made += 1
        bar.update(len(batch))
    bar.close()
    return finish_stage(run, prompts, settings.images_per_prompt, made_now=made)


# the main process calls the sampler for every image not yet recorded; the others wait
make_images = main_process_only(_make)


def _as_list(images, n: int, card: ModelCard) -> list:
    try:
        out = list(images)
    except TypeError:
        raise AuditError(f"{card.source} returned {type(images).__name__}; expected a list of {n} images") from None
    if len(out) != n:
        raise AuditError(f"{card.source} returned {len(out)} images for {n} prompts; expected one per prompt, in order")
    return out


def to_image(image, where: str):
    """A PIL image or encoded bytes from what a sampler returned (PIL, bytes, NumPy array, torch tensor)."""
    from PIL import Image

    if isinstance(image, (bytes, bytearray, Image.Image)):
        return image
    if hasattr(image, "detach"):  # a torch tensor, without importing torch here
        image = image.detach().float().cpu().numpy()
    import numpy as np

    if not isinstance(image, np.ndarray):
        raise AuditError(f"{where}: returned a {type(image).__name__}; expected a PIL image, bytes or an array")
    arr = image
    if arr.ndim == 3 and arr.shape[0] in (1, 3, 4) and arr.shape[-1] not in (1, 3, 4):  # C×H×W
        arr = arr.transpose(1, 2, 0)
    if arr.ndim == 3 and arr.shape[-1] == 1:
        arr = arr[..., 0]
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[-1] not in (3, 4)):
        raise AuditError(f"{where}: an array of shape {image.shape} is not an image (H×W×3, H×W or C×H×W)")
    if arr.dtype != np.uint8:
        arr = arr.astype("float64")
        if not np.isfinite(arr).all():
            raise AuditError(f"{where}: the image array holds NaN or infinite values")
        arr = (np.clip(arr, 0, 1) * 255).round().astype("uint8")
    return Image.fromarray(arr)
