"""Applying a :class:`~t2i_audit.variants.Variant` to a pipeline, with the libraries' own loaders.

* Replaced components are loaded before the pipeline and handed to ``DiffusionPipeline.from_pretrained(...,
  unet=obj)``: a folder through its class's ``from_pretrained``; a single ``.safetensors`` file through the
  same call on a staging folder holding the base component's ``config.json`` beside it (so the library's
  loader — dtype, tied weights, non-persistent buffers — runs as for any checkpoint).
* LoRAs go through the pipeline's own loader: ``pipe.load_lora_weights(folder, weight_name=...,
  adapter_name=...)`` per file, then one ``pipe.set_adapters(names, adapter_weights=scales)``
  (diffusers 0.42.1 loaders/lora_pipeline.py ``*LoraLoaderMixin.load_lora_weights``, loaders/lora_base.py
  ``LoraBaseMixin.set_adapters``). The text-only pipeline of activation extraction (no denoiser loaded)
  takes the text-encoder part of that same path: the family's ``lora_state_dict`` and its
  ``load_lora_into_text_encoder(state_dict, …, prefix=<component>)`` for each text encoder of
  ``_lora_loadable_modules`` — the calls ``load_lora_weights`` makes (e.g. StableDiffusionXLLoraLoaderMixin
  passes ``prefix=self.text_encoder_name`` and ``f"{self.text_encoder_name}_2"``); tests/fidelity pins the
  stored text states to ``encode_prompt`` of a fully loaded pipeline.

diffusers only warns when a LoRA's keys match no module ("No LoRA keys associated to …"): every load counts
the adapter layers peft injected (``BaseTunerLayer``) and refuses a LoRA that reached none.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from ..errors import AuditError
from ..quiet import library_logs
from . import ComponentSpec, Variant

ADAPTER_PREFIX = "t2i_audit_lora_"  # adapter names: t2i_audit_lora_0, _1 … in the order given


def require_peft():
    """peft, or the error that names the extra; diffusers' LoRA loaders need at least its MIN_PEFT_VERSION."""
    from ..extras import require

    peft = require("peft", extra="lora")
    from diffusers.utils import USE_PEFT_BACKEND
    from diffusers.utils.constants import MIN_PEFT_VERSION

    if not USE_PEFT_BACKEND:
        raise AuditError(f"peft {peft.__version__} is too old for diffusers' LoRA loaders (they need peft >= "
                         f"{MIN_PEFT_VERSION}): pip install -U 't2i-audit[lora]'")
    return peft


def adapter_name(i: int) -> str:
    return f"{ADAPTER_PREFIX}{i}"


def adapter_layers(pipe_or_components, name: str) -> dict[str, int]:
    """Per torch component: how many peft layers hold adapter ``name`` (a LoRA that reached nothing: all 0)."""
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

    comps = getattr(pipe_or_components, "components", pipe_or_components)
    out = {}
    for comp, module in comps.items():
        if isinstance(module, torch.nn.Module):
            out[comp] = sum(1 for m in module.modules() if isinstance(m, BaseTunerLayer)
                            and any(name in (getattr(m, attr, None) or {}) for attr in m.adapter_layer_names))
    return out


# --- replaced components ----------------------------------------------------------------------
def component_entry(path: str, revision, name: str) -> tuple[str, str]:
    """(library, class) of component ``name`` in the base pipeline's model_index.json."""
    from ..models import read_model_index

    entry = read_model_index(path, revision).get(name)
    if not isinstance(entry, list) or len(entry) != 2 or entry[1] is None:
        raise AuditError(f"--component {name}: the base pipeline at {path} has no {name} to replace")
    return str(entry[0]), str(entry[1])


def library_class(library: str, class_name: str, where: str):
    import importlib

    try:
        cls = getattr(importlib.import_module(library), class_name)
    except (ImportError, AttributeError):
        raise AuditError(f"{where}: no class {class_name!r} in {library}") from None
    return cls


def base_config_file(card, name: str) -> Path:
    """The base component's config.json (a local folder's, or downloaded from the Hub)."""
    root = card.pretrained_path()
    local = Path(root) / name / "config.json"
    if Path(root).is_dir():
        if not local.is_file():
            raise AuditError(f"--component {name}: the base pipeline {root} has no {name}/config.json")
        return local
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(root, f"{name}/config.json", revision=card.revision))


@contextlib.contextmanager
def staged_file(card, comp: ComponentSpec, weights_name: str):
    """A temporary folder holding the base component's config.json and a link to ``comp``'s weights file
    (named as the class's loader expects), so a single file loads through ``from_pretrained``."""
    with tempfile.TemporaryDirectory(prefix="t2i-audit-component-") as tmp:
        (Path(tmp) / "config.json").write_bytes(base_config_file(card, comp.name).read_bytes())
        target = Path(tmp) / weights_name
        try:
            os.symlink(comp.path, target)
        except OSError:  # no symlinks here (some filesystems): a copy reads the same bytes
            import shutil

            shutil.copyfile(comp.path, target)
        yield tmp


def weights_name(library: str) -> str:
    """The single-file weights name each library's ``from_pretrained`` looks for."""
    if library == "transformers":
        return "model.safetensors"  # transformers.utils SAFE_WEIGHTS_NAME
    return "diffusion_pytorch_model.safetensors"  # diffusers.utils SAFETENSORS_WEIGHTS_NAME


def load_component(card, comp: ComponentSpec, dtype: str):
    """``comp`` loaded as the base pipeline's component class (a folder: the class its config names)."""
    import torch

    library, class_name = component_entry(card.pretrained_path(), card.revision, comp.name)
    cls = library_class(library, class_name, f"--component {comp.name}")
    kw = {"dtype": getattr(torch, dtype)} if isinstance(cls, type) and issubclass(cls, torch.nn.Module) else {}
    where = f"--component {comp.name}={comp.path}"
    try:
        if comp.kind == "folder":
            return cls.from_pretrained(comp.path, **kw)
        with staged_file(card, comp, weights_name(library)) as folder:
            return cls.from_pretrained(folder, **kw)
    except (OSError, ValueError, RuntimeError) as e:
        raise AuditError(f"{where}: cannot load it as the base model's {class_name}: {e}") from None


def load_replacements(card, dtype: str, *, text_only: bool = False) -> dict:
    """The card's replaced components, loaded, as ``from_pretrained`` keyword arguments (``text_only``: the
    tokenizers and text encoders alone)."""
    return {c.name: load_component(card, c, dtype) for c in card.adapted.components
            if not text_only or c.name.startswith(("text_encoder", "tokenizer"))}


# --- LoRAs ------------------------------------------------------------------------------------
def _state_dict(pipe, file: Path) -> tuple[dict, dict | None, dict | None]:
    """(state_dict, network_alphas, metadata) by the family's own ``lora_state_dict`` (SD3's returns no alphas)."""
    got = type(pipe).lora_state_dict(str(file.parent), weight_name=file.name, return_lora_metadata=True)
    if len(got) == 3:
        return got
    state_dict, metadata = got
    return state_dict, None, metadata


def text_lora_components(pipe) -> list[str]:
    """The text encoders the family's LoRA loader loads into (``_lora_loadable_modules``), as loaded."""
    return [c for c in getattr(type(pipe), "_lora_loadable_modules", ())
            if c.startswith("text_encoder") and getattr(pipe, c, None) is not None]


def _load_text_only(pipe, file: Path, name: str) -> None:
    state_dict, alphas, metadata = _state_dict(pipe, file)
    for comp in text_lora_components(pipe):
        type(pipe).load_lora_into_text_encoder(dict(state_dict), network_alphas=alphas,
                                               text_encoder=getattr(pipe, comp), prefix=comp,
                                               lora_scale=pipe.lora_scale, adapter_name=name, metadata=metadata,
                                               _pipeline=pipe)


def apply_loras(pipe, variant: Variant, *, text_only: bool = False) -> list[dict]:
    """Load ``variant``'s LoRAs into ``pipe`` with its own loader and activate them at their scales; returns
    per LoRA the adapter layers it reached per component. ``text_only``: a pipeline without its denoiser
    (activation extraction), where only the text-encoder part applies."""
    if not variant.loras:
        return []
    require_peft()
    if not hasattr(pipe, "load_lora_weights"):
        raise AuditError(f"{type(pipe).__name__} has no LoRA loader (load_lora_weights): --lora cannot be applied")
    report, active = [], []
    for i, lora in enumerate(variant.loras):
        name, file = adapter_name(i), Path(lora.file)
        try:  # diffusers' "No LoRA keys associated to CLIPTextModel … open an issue" for a UNet-only LoRA is
            # silenced: what each LoRA reached, per component, is recorded below ("layers")
            with library_logs():
                if text_only:
                    _load_text_only(pipe, file, name)
                else:
                    pipe.load_lora_weights(str(file.parent), weight_name=file.name, adapter_name=name)
        except (ValueError, KeyError, RuntimeError) as e:
            raise AuditError(f"--lora {lora.spec}: {type(pipe).__name__}.load_lora_weights refused it: {e}") from None
        layers = {k: v for k, v in adapter_layers(pipe, name).items() if v}
        if not text_only and not layers:
            raise AuditError(f"--lora {lora.spec}: its keys match no layer of {type(pipe).__name__} (diffusers loaded "
                             "nothing and only warned): a LoRA made for another model?")
        report.append({"adapter": name, "source": lora.source, "sha256": lora.sha256, "scale": lora.scale,
                       "layers": layers})
        if layers:
            active.append((name, lora.scale))
    if active:  # one call with every adapter, as diffusers' docs combine LoRAs
        pipe.set_adapters([n for n, _ in active], adapter_weights=[s for _, s in active])
    return report


def apply_variant(pipe, variant: Variant, card=None, *, dtype: str | None = None) -> dict:
    """Apply ``variant`` to an already loaded pipeline (a training loop's live pipeline): replaced
    components are loaded (``card``: the base model they replace into, for a single file's config) and
    registered in place of the pipeline's, then the LoRAs are loaded and activated. Returns what was done."""
    import torch

    done: dict = {}
    if variant.components:
        if card is None:
            raise AuditError("apply_variant: replacing components needs the base model's card (its configs)")
        dtype = dtype or str(getattr(pipe, "dtype", torch.float32)).replace("torch.", "")
        replaced = {c.name: load_component(card, c, dtype) for c in variant.components}
        device = getattr(pipe, "device", None)
        for obj in replaced.values():
            if isinstance(obj, torch.nn.Module) and device is not None:
                obj.to(device)
        pipe.register_modules(**replaced)
        done["components"] = sorted(replaced)
    done["loras"] = apply_loras(pipe, variant)
    return done
