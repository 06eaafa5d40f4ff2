"""Optional dependencies: import them with an error that names the extra to install.

The core install (``pip install t2i-audit``) leaves out what would replace a lab's torch:
open_clip_torch needs torchvision, and every torchvision release pins one torch release. Code
that needs such a package imports it through this module::

    from ..extras import open_clip          # the real module, or AuditError naming the extra
    vision = require("torchvision", extra="open-clip")

A missing package raises :class:`AuditError` ("open_clip_torch is not installed: pip install
't2i-audit[open-clip]'"; extra names are the normalised ones, PEP 685, that pip matches). An
installed one that fails to import (e.g. a torchvision built for another torch: "operator
torchvision::nms does not exist") raises AuditError with that cause.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from .errors import AuditError

# import name -> (distribution to pip install, extra of t2i-audit that brings it)
OPTIONAL: dict[str, tuple[str, str]] = {
    "open_clip": ("open_clip_torch", "open-clip"),
    "torchvision": ("torchvision", "vlm"),
    "timm": ("timm", "open-clip"),
    "peft": ("peft", "lora"),  # --lora: diffusers' LoRA loaders run on peft (t2i_audit/variants)
    "openai": ("openai", "hosted"),  # --model openai:MODEL (t2i_audit/sources/providers.py)
}


def install_hint(package: str, extra: str) -> str:
    return f"{package} is not installed: pip install 't2i-audit[{extra}]' (or pip install {package})"


def require(module: str, extra: str | None = None, package: str | None = None) -> ModuleType:
    """Import ``module``; if it is missing, raise AuditError naming the extra that installs it."""
    known_package, known_extra = OPTIONAL.get(module.split(".")[0], (module, None))
    package = package or known_package
    extra = extra or known_extra or "dev"
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        # only the optional package itself being absent gets the install hint; a missing
        # dependency *inside* it is reported as it is (installing the extra again would not help)
        top = module.split(".")[0]
        if e.name is None or e.name.split(".")[0] == top:
            raise AuditError(install_hint(package, extra)) from None
        raise AuditError(f"{package} is installed but cannot be imported: {e}") from e
    except (ImportError, RuntimeError, OSError) as e:
        hint = ""
        if "torchvision" in str(e):
            hint = (" (torchvision must be the build made for the installed torch; "
                    "reinstall them together, e.g. with -c constraints.txt)")
        raise AuditError(f"{package} is installed but cannot be imported: {e}{hint}") from e


def auto_processor(model_id: str, **kwargs):
    """``transformers.AutoProcessor.from_pretrained``, naming the [vlm] extra when the processor
    needs torchvision: in transformers 5 the video processors of Qwen2-VL / Qwen2.5-VL / Qwen3-VL
    / InternVL are torchvision-only ("Qwen2VLVideoProcessor requires the Torchvision library"),
    while image-only processors fall back to their PIL versions."""
    import transformers

    try:
        return transformers.AutoProcessor.from_pretrained(model_id, **kwargs)
    except (ImportError, AttributeError) as e:
        if importlib.util.find_spec("torchvision") is not None:
            raise
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        raise AuditError(f"{model_id}: its processor needs torchvision ({e.__class__.__name__}: {first}) "
                         f"{install_hint('torchvision', 'vlm')}") from e


def __getattr__(name: str) -> ModuleType:
    """``from t2i_audit.extras import open_clip``: the module, imported through :func:`require`."""
    if name in OPTIONAL:
        return require(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
