"""A pipeline's own default settings, for a model without a card (a local folder or an ``hf:`` repo).

Without a card, a run used to fall back to one generic 512 px / 30 steps / guidance 5.0: a local SDXL
fine-tune was audited at 512², half its native size. Instead the pipeline is asked, as diffusers itself
answers when ``__call__`` gets no size, steps or guidance:

* steps and guidance: the defaults of the pipeline class's ``__call__`` signature (``num_inference_steps``,
  and ``guidance_scale`` or the argument families.yaml names in ``guidance_arg``), read with ``inspect``;
* size: a default ``height`` in that signature (Kandinsky 5: ``height: int = 1024``), else what the body
  computes from the pipeline instance — ``self.default_sample_size * self.vae_scale_factor``
  (pipeline_stable_diffusion_xl.py ``__call__``: ``height = height or self.default_sample_size *
  self.vae_scale_factor``; ``__init__`` sets ``default_sample_size`` from ``unet.config.sample_size``), or
  ``denoiser.config.sample_size * self.vae_scale_factor`` where the pipeline has no ``default_sample_size``
  (pipeline_stable_diffusion.py, pipeline_pixart_sigma.py, pipeline_cogview4.py).

The instance is the pipeline class's own ``__init__`` run on the folder's components with every model
built from its ``config.json`` on the meta device (``accelerate.init_empty_weights``: no weight is read,
so a 20 B-parameter model resolves in seconds); tokenizers, schedulers and processors load as usual (small
files). An ``hf:`` repo contributes its JSON / text files only (``snapshot_download`` without weights).
"""

from __future__ import annotations

import hashlib
import inspect
from functools import lru_cache
from pathlib import Path
from typing import Optional

from .errors import AuditError

CONFIG_FILES = ("*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja")  # everything but weights


def pipeline_folder(path_or_repo: str, revision: Optional[str] = None) -> Path:
    """A local folder with the pipeline's configs: the folder itself, or an ``hf:`` repo's config files."""
    p = Path(path_or_repo)
    if p.is_dir():
        return p
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(path_or_repo, revision=revision, allow_patterns=list(CONFIG_FILES)))
    except Exception as e:  # noqa: BLE001 - offline, gated, missing: one message naming the repo
        raise AuditError(f"hf:{path_or_repo}: cannot read the pipeline's configs to find its default settings "
                         f"({type(e).__name__}: {e})") from None


def _meta_component(folder: Path, name: str, library: str, class_name: str):
    """Component ``name``: a model built from its config on the meta device, anything else loaded."""
    import importlib

    import torch

    module = importlib.import_module(library)
    cls = getattr(module, class_name, None)
    if cls is None:
        raise AuditError(f"{folder / 'model_index.json'}: {name}: no class {class_name!r} in {library}")
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        return cls.from_pretrained(folder, subfolder=name)  # tokenizer, scheduler, processor, guider
    from accelerate import init_empty_weights

    with init_empty_weights():
        if library == "transformers":
            from transformers import AutoConfig

            return cls._from_config(AutoConfig.from_pretrained(folder / name))
        return cls.from_config(cls.load_config(folder, subfolder=name))


def meta_pipeline(folder: Path):
    """The pipeline class's own ``__init__`` on meta-device models built from the folder's configs."""
    import diffusers

    from .safeload import read_json

    index = read_json(folder / "model_index.json")
    cls = getattr(diffusers, index["_class_name"])
    params = inspect.signature(cls.__init__).parameters
    kwargs = {}
    for key, spec in index.items():
        if key.startswith("_") or key not in params:
            continue
        if isinstance(spec, list) and len(spec) == 2:
            kwargs[key] = None if spec[0] is None else _meta_component(folder, key, spec[0], spec[1])
        else:
            kwargs[key] = spec  # a registered config value (force_zeros_for_empty_prompt, is_distilled …)
    return cls(**kwargs)


def default_size(pipe) -> tuple[Optional[int], str]:
    """(square size in px, where it comes from) as the pipeline's ``__call__`` fills a missing height."""
    cls = type(pipe).__name__
    height = inspect.signature(type(pipe).__call__).parameters.get("height")
    if height is not None and isinstance(height.default, int):
        return height.default, f"{cls}.__call__ height={height.default}"
    factor = getattr(pipe, "vae_scale_factor", None)
    sample = getattr(pipe, "default_sample_size", None)
    where = "default_sample_size"
    if sample is None:
        denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
        sample = getattr(getattr(denoiser, "config", None), "sample_size", None)
        where = f"{'unet' if getattr(pipe, 'unet', None) is not None else 'transformer'}.config.sample_size"
    if isinstance(sample, (list, tuple)):  # UNet2DConditionModel accepts (height, width)
        sample = sample[0]
    if not isinstance(sample, int) or not isinstance(factor, int):
        return None, f"{cls}: no default_sample_size / sample_size and vae_scale_factor to compute a size from"
    return sample * factor, f"{cls}: {where} {sample} x vae_scale_factor {factor}"


def call_defaults(pipeline_class: type) -> dict[str, tuple]:
    """``{"steps": (value, source), "guidance": (value, source)}`` from the ``__call__`` signature."""
    from .families import pipeline_family

    params = inspect.signature(pipeline_class.__call__).parameters
    guidance_arg = (pipeline_family(pipeline_class.__name__) or {}).get("guidance_arg", "guidance_scale")
    out = {}
    for ours, arg in (("steps", "num_inference_steps"), ("guidance", guidance_arg)):
        p = params.get(arg)
        if p is not None and isinstance(p.default, (int, float)) and not isinstance(p.default, bool):
            out[ours] = (p.default, f"{pipeline_class.__name__}.__call__ {arg}={p.default}")
    return out


@lru_cache(maxsize=32)
def _defaults(path_or_repo: str, revision: Optional[str], stamp: str) -> tuple[dict, dict]:
    folder = pipeline_folder(path_or_repo, revision)
    try:
        pipe = meta_pipeline(folder)
    except AuditError:
        raise
    except Exception as e:  # noqa: BLE001 - an unusual folder: said, never a traceback
        raise AuditError(f"{folder}: cannot build the pipeline from its configs to read its default settings "
                         f"({type(e).__name__}: {e}); pass --steps, --guidance and --size") from None
    defaults, sources = {}, {}
    for key, (value, source) in call_defaults(type(pipe)).items():
        defaults[key], sources[key] = value, source
    size, source = default_size(pipe)
    if size is not None:
        defaults["size"], sources["size"] = size, source
    return defaults, sources


def pipeline_defaults(path_or_repo: str, revision: Optional[str] = None) -> tuple[dict, dict]:
    """(settings, where each comes from) that the pipeline uses when ``__call__`` gets none; a setting the
    pipeline has no default for is left out (the caller keeps its generic one and says so)."""
    index = Path(path_or_repo) / "model_index.json"
    # an edited folder is read again: keyed by the index's content (an mtime stays when a file is replaced)
    stamp = hashlib.sha256(index.read_bytes()).hexdigest() if index.is_file() else ""
    defaults, sources = _defaults(path_or_repo, revision, stamp)
    return dict(defaults), dict(sources)
