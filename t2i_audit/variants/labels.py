"""What a run's variant is called wherever the run is named: the report page and ``summary.json``, the ``run``
headline, ``compare``'s and the board's labels, the progress line of generation (``track`` names each checkpoint
through it). One function (:func:`label_of`) over the record the run keeps (manifest.json ``model.adapted``), so
a base run and a LoRA run of one model never read alike anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional

GENERIC_STEMS = ("pytorch_lora_weights", "diffusion_pytorch_model", "model")  # names training scripts give every file
SHORT_SHA = 6


def label_of(described: Optional[Mapping]) -> str:
    """The name of a recorded variant (manifest.json ``model.adapted``, :meth:`Variant.described`) wherever a run is
    named: ``my_lora@0.8 (sha256 1a2b3c)`` per LoRA, ``unet=checkpoint-3/unet (sha256 4d5e6f)`` per component,
    joined by `` + ``; ``""`` for the base model. A file's name alone can repeat (every LoRA script writes
    pytorch_lora_weights.safetensors, every checkpoint a ``unet/``): its folder is named then, and the short sha256
    tells two files of one name apart. A record without sha256 (run.yaml's specs only) is named without it."""
    if not isinstance(described, Mapping):
        return ""
    parts = []
    loras, comps = described.get("loras"), described.get("components")
    for x in loras if isinstance(loras, list) else ():
        if not isinstance(x, Mapping):
            continue
        source = str(x.get("source") or x.get("file") or "?")
        name = _hub_name(source) if source.startswith("hf:") else _file_name(source, parent_only=True)
        parts.append(f"{name}@{_scale_text(x.get('scale'))}{_sha_text(x.get('sha256'))}")
    for comp, x in sorted(comps.items(), key=lambda kv: str(kv[0])) if isinstance(comps, Mapping) else ():
        x = x if isinstance(x, Mapping) else {}
        parts.append(f"{comp}={_file_name(str(x.get('path') or '?'), component=str(comp))}{_sha_text(x.get('sha256'))}")
    return " + ".join(parts)


def model_label(model: str, described: Optional[Mapping]) -> str:
    """``mini`` for a base run, ``mini + my_lora@0.8 (sha256 1a2b3c)`` for a run with a variant (:func:`label_of`)."""
    return joined(model, label_of(described))


def joined(model: str, variant: Optional[str]) -> str:
    """A model's name and its variant's label (:func:`label_of`) as one name."""
    return f"{model} + {variant}" if variant else str(model)


def described_of_config(config: Mapping) -> dict:
    """run.yaml's ``loras`` (``SOURCE:SCALE``) / ``components`` (name → path) in the shape of
    :meth:`Variant.described`, without the sha256 only the manifest holds (for records made before it was kept)."""
    out: dict = {}
    loras, comps = config.get("loras"), config.get("components")
    if isinstance(loras, list) and loras:
        out["loras"] = []
        for spec in map(str, loras):
            source, _, scale = spec.rpartition(":")
            try:
                out["loras"].append({"source": source, "scale": float(scale)})
            except ValueError:
                out["loras"].append({"source": spec, "scale": 1.0})
    if isinstance(comps, Mapping) and comps:
        out["components"] = {str(n): {"path": str(p)} for n, p in comps.items()}
    return out


def _file_name(path: str, *, parent_only: bool = False, component: str = "") -> str:
    p = Path(path)
    stem = p.name[: -len(".safetensors")] if p.name.endswith(".safetensors") else p.name
    generic = stem.startswith(GENERIC_STEMS) or bool(component and stem.startswith(component))
    if not generic or not p.parent.name:
        return stem if parent_only else p.name
    return p.parent.name if parent_only else f"{p.parent.name}/{p.name}"


def _hub_name(source: str) -> str:
    """``hf:org/repo[@rev][/file]`` → ``org/repo[/file]`` (the sha256 names the bytes a revision gave)."""
    org, _, rest = source[3:].partition("/")
    repo, _, file = rest.partition("/")
    return f"{org}/{repo.partition('@')[0]}" + (f"/{file}" if file else "")


def _scale_text(scale) -> str:
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        return str(scale)
    short = format(scale, "g")
    return short if float(short) == scale else repr(float(scale))


def _sha_text(sha) -> str:
    return f" (sha256 {sha[:SHORT_SHA]})" if isinstance(sha, str) and sha else ""
