"""What a user changed in a base model: LoRAs and replaced components (``--lora``, ``--component``).

A :class:`Variant` is resolved from the run's settings (``RunConfig.loras`` / ``components``): every
file is found and hashed here, so its sha256 — never its path — enters the run's identity, fingerprint
and manifest (another adapter, scale or file content is another run; a resume with another one is
refused by the ownership marker). No torch here: ``load`` applies a variant to a pipeline (the
pipeline's own ``load_lora_weights`` / ``set_adapters``), ``check`` refuses one that cannot fit the
model before a run folder is claimed.

Spec syntax:

* ``--lora PATH_OR_REPO[:SCALE]``: a ``.safetensors`` file, a folder holding one
  (``pytorch_lora_weights.safetensors``, the name diffusers' training scripts write, or its only
  ``.safetensors``), or a Hub repo ``org/repo`` / ``hf:org/repo[@revision][/file.safetensors]``; the
  scale (default 1.0) is a finite number after the last ``:``.
* ``--component NAME=PATH``: a pipeline component (``unet``, ``transformer``, ``text_encoder``,
  ``vae`` …) from a diffusers / transformers folder (its ``config.json`` names the class) or from one
  ``.safetensors`` file loaded into the base component's class and config.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional

from ..errors import AuditError

LORA_WEIGHT_NAME = "pytorch_lora_weights.safetensors"  # diffusers.loaders.lora_base LORA_WEIGHT_NAME_SAFE
LORA_SYNTAX = "PATH_OR_REPO[:SCALE], e.g. ./my_lora.safetensors:0.8"
# help text is rich markup (typer's help pages): a bracket that reads as a tag ("[/file.safetensors]") is escaped
LORA_HELP = ("LoRA to apply, PATH_OR_REPO[:SCALE] (scale default 1.0; repeatable, applied together): a .safetensors "
             "file, a folder holding one, or a Hub repo (org/repo, hf:org/repo\\[@rev]\\[/file.safetensors]); loaded by "
             "the pipeline's own load_lora_weights (needs t2i-audit\\[lora]).")
COMPONENT_HELP = ("NAME=PATH: replace a pipeline component (unet, transformer, text_encoder, vae …) with a "
                  "diffusers/transformers folder or one .safetensors file of the same architecture (repeatable).")
RUN_VARIANT_NOTE = " Default: the run's own; another is refused."
COMPONENT_SYNTAX = "NAME=PATH, e.g. unet=./my-unet (a component folder or a .safetensors file)"


@dataclass(frozen=True)
class LoraSpec:
    source: str  # as resolved: an absolute local path, or hf:org/repo[@rev][/file]
    scale: float
    file: str  # the local weights file (downloaded for a Hub LoRA)
    sha256: str

    @property
    def spec(self) -> str:
        """``SOURCE:SCALE`` as run.yaml records it (``repr``: the float reads back exactly)."""
        return f"{self.source}:{self.scale!r}"


@dataclass(frozen=True)
class ComponentSpec:
    name: str  # the pipeline's component (model_index.json key)
    path: str  # absolute
    kind: str  # "folder" | "file"
    sha256: str  # the file's, or of the folder's files (names and contents)


@dataclass(frozen=True)
class Variant:
    """LoRAs (applied in order, each with its scale) and replaced components. Empty: the base model."""

    loras: tuple[LoraSpec, ...] = ()
    components: tuple[ComponentSpec, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.loras or self.components)

    def identity(self) -> dict:
        """What the variant changes, by content: each LoRA's sha256 and scale, each component's sha256;
        ``{}`` for the base model (so a run without one keeps the identity it always had)."""
        out: dict = {}
        if self.loras:
            out["loras"] = [{"sha256": x.sha256, "scale": x.scale} for x in self.loras]
        if self.components:
            out["components"] = {c.name: {"sha256": c.sha256} for c in sorted(self.components, key=lambda c: c.name)}
        return out

    def described(self) -> dict:
        """The identity with where each file was found (the manifest's record)."""
        out = self.identity()
        if self.loras:
            out["loras"] = [{"source": x.source, "file": x.file, **i} for x, i in zip(self.loras, out["loras"])]
        if self.components:
            by = {c.name: c for c in self.components}
            out["components"] = {n: {"path": by[n].path, "kind": by[n].kind, **v} for n, v in out["components"].items()}
        return out

    def key(self) -> str:
        """A short hash of the identity for cache keys; ``""`` for the base model (keys stay as they were)."""
        if not self:
            return ""
        from ..resume import settings_id

        return settings_id(self.identity())

    def as_config(self) -> dict:
        """``{"loras": [...], "components": {...}}`` as run.yaml records them (absolute paths)."""
        return {"loras": [x.spec for x in self.loras], "components": {c.name: c.path for c in self.components}}

    def component(self, name: str) -> Optional[ComponentSpec]:
        return next((c for c in self.components if c.name == name), None)


NO_VARIANT = Variant()


# --- parsing ----------------------------------------------------------------------------------
def split_scale(spec: str) -> tuple[str, float]:
    """``PATH_OR_REPO[:SCALE]`` → (source, scale). The scale follows the last ``:`` unless the whole spec
    names an existing path or what follows holds a path separator (``hf:org/repo``)."""
    text = str(spec).strip()
    if not text:
        raise AuditError(f"--lora {spec!r}: empty; expected {LORA_SYNTAX}")
    if Path(text).expanduser().exists():
        return text, 1.0
    head, sep, tail = text.rpartition(":")
    if not sep or not head or head in ("hf", "local") or "/" in tail or "\\" in tail:
        return text, 1.0
    try:
        scale = float(tail)
    except ValueError:
        raise AuditError(f"--lora {spec!r}: scale {tail!r} is not a number; expected {LORA_SYNTAX}") from None
    if not math.isfinite(scale):
        raise AuditError(f"--lora {spec!r}: scale {tail!r} is not a finite number; expected {LORA_SYNTAX}")
    return head, scale


def split_component(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` → (name, path)."""
    name, sep, path = str(spec).partition("=")
    name, path = name.strip(), path.strip()
    if not sep or not name or not path:
        raise AuditError(f"--component {spec!r}: expected {COMPONENT_SYNTAX}")
    if not name.isidentifier():
        raise AuditError(f"--component {spec!r}: {name!r} is not a pipeline component name (unet, transformer, "
                         "text_encoder, vae …)")
    return name, path


def component_options(specs: Optional[Iterable[str]]) -> dict[str, str]:
    """Repeated ``--component NAME=PATH`` options as a mapping; a name given twice is refused."""
    out: dict[str, str] = {}
    for spec in specs or ():
        name, path = split_component(spec)
        if name in out:
            raise AuditError(f"--component {name}: given twice ({out[name]!r} and {path!r})")
        out[name] = path
    return out


# --- resolving (files found and hashed) -------------------------------------------------------
def resolve(loras: Iterable[str] = (), components: Optional[Mapping[str, str]] = None) -> Variant:
    """The variant of a run's ``loras`` / ``components`` settings: every file found and hashed, or a
    located AuditError (a missing file, a bad scale, a folder without LoRA weights)."""
    resolved = tuple(resolve_lora(spec) for spec in loras or ())
    _each_lora_once(list(loras or ()), resolved)
    comps = tuple(resolve_component(n, p) for n, p in sorted((components or {}).items()))
    return Variant(resolved, comps)


def _each_lora_once(specs: list[str], resolved: tuple) -> None:
    """The same weights given twice (the same file, another path to it, or a copy: one sha256) would be loaded as
    two adapters and applied twice — a scale the user did not ask for. Refused, naming both specs."""
    first: dict[str, int] = {}
    for i, lora in enumerate(resolved):
        j = first.setdefault(lora.sha256, i)
        if j != i:
            raise AuditError(f"--lora {specs[i]!r}: the same LoRA weights as --lora {specs[j]!r} (sha256 "
                             f"{lora.sha256[:12]}…): each LoRA is applied once; give it once, with the scale you "
                             f"want (PATH:SCALE)")


def resolve_lora(spec: str) -> LoraSpec:
    from ..rundir import file_sha256

    source, scale = split_scale(spec)
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix != ".safetensors":
            raise AuditError(f"--lora {spec!r}: {path} is not a .safetensors file (LoRA weights are read as "
                             "safetensors only: a pickle file can run code)")
        file = path.resolve()
    elif path.is_dir():
        file = _lora_file_in(path, spec)
    elif source.startswith("hf:") or _looks_like_repo(source):
        return _hub_lora(spec, source, scale)
    else:
        raise AuditError(f"--lora {spec!r}: no such file or folder {path}")
    return LoraSpec(source=str(file), scale=scale, file=str(file), sha256=file_sha256(file))


def _lora_file_in(folder: Path, spec: str) -> Path:
    if (folder / LORA_WEIGHT_NAME).is_file():
        return (folder / LORA_WEIGHT_NAME).resolve()
    found = sorted(folder.glob("*.safetensors"))
    if len(found) == 1:
        return found[0].resolve()
    what = f"several ({', '.join(f.name for f in found[:5])})" if found else "none"
    raise AuditError(f"--lora {spec!r}: folder {folder} holds {what} .safetensors files and no {LORA_WEIGHT_NAME}; "
                     "name the file")


def _looks_like_repo(source: str) -> bool:
    return source.count("/") == 1 and not source.startswith((".", "/", "~")) and not source.endswith(".safetensors")


def _hub_lora(spec: str, source: str, scale: float) -> LoraSpec:
    """``[hf:]org/repo[@rev][/file.safetensors]``: the file downloaded through the Hub cache (as
    ``load_lora_weights(repo_id, weight_name=...)`` would), then hashed like a local one."""
    from ..rundir import file_sha256

    ref = source[3:] if source.startswith("hf:") else source
    parts = ref.split("/")
    if len(parts) < 2 or not all(parts):
        raise AuditError(f"--lora {spec!r}: expected hf:org/repo[@revision][/file.safetensors] or a local path")
    name, _, revision = parts[1].partition("@")
    repo, weight = f"{parts[0]}/{name}", "/".join(parts[2:]) or LORA_WEIGHT_NAME
    try:
        from huggingface_hub import hf_hub_download

        file = Path(hf_hub_download(repo, weight, revision=revision or None))
    except Exception as e:  # offline, no such repo / file / revision, no access: the hub's own words
        raise AuditError(f"--lora {spec!r}: no such local file or folder, and {weight} of Hub repo {repo} cannot "
                         f"be fetched ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    canonical = (f"hf:{repo}" + (f"@{revision}" if revision else "")
                 + (f"/{weight}" if weight != LORA_WEIGHT_NAME else ""))
    return LoraSpec(source=canonical, scale=scale, file=str(file), sha256=file_sha256(file))


def resolve_component(name: str, path_text: str) -> ComponentSpec:
    path = Path(path_text).expanduser()
    where = f"--component {name}={path_text}"
    if path.is_file():
        if path.suffix != ".safetensors":
            raise AuditError(f"{where}: {path} is not a .safetensors file (a component file is read as safetensors "
                             "only; a folder with config.json works too)")
        from ..rundir import file_sha256

        return ComponentSpec(name, str(path.resolve()), "file", file_sha256(path))
    if path.is_dir():
        if not (path / "config.json").is_file():
            if (path / name / "config.json").is_file():  # a whole pipeline or training output: its subfolder
                path = path / name
            else:
                raise AuditError(f"{where}: folder {path} has no config.json (expected a diffusers / transformers "
                                 "component folder, as save_pretrained writes it)")
        return ComponentSpec(name, str(path.resolve()), "folder", folder_sha256(path))
    raise AuditError(f"{where}: no such file or folder {path}")


def folder_sha256(folder: Path) -> str:
    """sha256 over a folder's files: each relative name and its sha256, in name order (hidden files left out)."""
    from ..rundir import file_sha256

    h = hashlib.sha256()
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        rel = f.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):
            continue
        h.update(f"{rel.as_posix()}\0{file_sha256(f)}\n".encode())
    return h.hexdigest()


def cache_key(card) -> list:
    """What a cache key of arrays made by ``card``'s pipeline adds for its variant: ``[]`` for the base model
    (keys made before variants existed stay valid), else the variant's key."""
    return [card.adapted.key()] if card.adapted else []


def identity_of(described: Mapping) -> dict:
    """:meth:`Variant.identity` of a :meth:`Variant.described` record (manifest.json)."""
    out: dict = {}
    loras, comps = described.get("loras"), described.get("components")
    if isinstance(loras, list) and loras:
        out["loras"] = [{"sha256": x.get("sha256"), "scale": x.get("scale")} if isinstance(x, dict) else x
                        for x in loras]
    if isinstance(comps, dict) and comps:
        out["components"] = {str(n): {"sha256": v.get("sha256")} if isinstance(v, dict) else v
                             for n, v in sorted(comps.items())}
    return out


__all__ = ["Variant", "LoraSpec", "ComponentSpec", "NO_VARIANT", "resolve", "resolve_lora", "resolve_component",
           "split_scale", "split_component", "component_options", "folder_sha256", "identity_of",
           "cache_key"]
