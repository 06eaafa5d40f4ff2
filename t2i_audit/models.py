"""Model cards (models.yaml beside this file) and resolution of any model reference.

A reference is a card name (``sd-xl``, ``tiny-sd``, ``mini``), ``hf:org/repo[@revision]``,
or a local diffusers pipeline folder (``./my-pipeline``, ``local:/abs/path``). Every one ends
in the same ``DiffusionPipeline.from_pretrained`` call: tiny cards are materialised to a
local folder first, so tests walk the real loading path. No torch import here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from .errors import AuditError, did_you_mean
from .safeload import load_yaml, read_json
from .variants import NO_VARIANT, Variant

CARDS_FILE = Path(__file__).with_name("models.yaml")
PACKAGE_DIR = Path(__file__).parent
GENERIC_DEFAULTS = {"steps": 30, "guidance": 5.0, "size": 512, "dtype": "float16"}


@dataclass(frozen=True)
class ModelCard:
    name: str
    repo: Optional[str] = None  # HF repo id
    revision: Optional[str] = None
    local: Optional[str] = None  # local pipeline folder
    tiny: bool = False
    pipeline: Optional[str] = None
    defaults: dict = field(default_factory=lambda: dict(GENERIC_DEFAULTS))
    call: dict = field(default_factory=dict)
    text_encoders_: tuple = ()
    scorers: tuple = ()  # the default scorers for this model's runs (e.g. the mini world's judges)
    variant: Optional[str] = None  # weights variant to download ("fp16": half the bytes of fp32 files)
    vae_dtype: Optional[str] = None  # decode in this dtype whatever the run's (PixArt-Σ fp16 VAE → NaN)
    offload: Optional[str] = None  # "model" / "sequential": CPU offload a GPU too small for the weights needs
    vae_tiling: bool = False  # decode in tiles (large sizes on small GPUs; changes pixels near tile seams)
    notes: Optional[str] = None
    licence: Optional[str] = None  # as stated on the model's hub page
    gated: Optional[bool] = None  # the hub asks to accept terms (HF token) before download
    components: dict = field(default_factory=dict)  # pipeline components the repo does not ship: name -> spec
    sources: dict = field(default_factory=dict)  # setting (steps, guidance, size, call …) -> where it comes from
    adapted: Variant = NO_VARIANT  # the user's LoRAs and replaced components on top of this model (variants.py)
    # where the images come from (t2i_audit/sources): "pipeline" (a diffusers pipeline: every stage), or a source
    # without one — "images" (a folder or dataset made elsewhere), "endpoint" / "openai" (a hosted model), "python"
    # (a lab's own sampler) — whose runs generate, score and report but cannot be probed (no activations)
    kind: str = "pipeline"
    target: Optional[str] = None  # what a non-pipeline source reads or calls: the folder, URL, model name, callable
    source_options: dict = field(default_factory=dict)  # how the source reads it (a folder's layout: {"layout": …})

    @property
    def has_pipeline(self) -> bool:
        return self.kind == "pipeline"

    def with_variant(self, variant: Optional[Variant] = None, *, loras=None, components=None) -> "ModelCard":
        """This card with ``variant`` applied wherever its pipeline is built (generate.load_pipeline, the text-only
        pipeline of activation extraction); or with the variant that ``loras`` (``PATH_OR_REPO[:SCALE]`` specs) and
        ``components`` (name -> path) resolve to. ``None`` / nothing: the card as it is."""
        from dataclasses import replace

        from . import variants

        if variant is None:
            if not loras and not components:
                return self
            variant = variants.resolve(loras or (), components or {})
        return replace(self, adapted=variant) if variant or self.adapted else self

    def label(self) -> str:
        """The model as a run made with this card is named (``mini + my_lora@0.8 (sha256 1a2b3c)``; variants/labels.py)."""
        from .variants.labels import model_label

        return model_label(self.name, self.adapted.described() if self.adapted else None)

    def pretrained_path(self) -> str:
        """What to hand to ``from_pretrained``: a local folder or an HF repo id."""
        if self.tiny:
            from .tiny import materialize

            return str(materialize(self.name))
        if self.local:
            return self.local
        return self.repo

    @property
    def source(self) -> str:
        if not self.has_pipeline:
            return f"{self.kind}:{self.target}"
        if self.tiny:
            return f"tiny:{self.name}"
        return self.local or f"hf:{self.repo}" + (f"@{self.revision}" if self.revision else "")

    @property
    def text_encoders(self) -> list[dict]:
        """Tokenizer/text-encoder subfolders; read from model_index.json when the card has none; a text encoder the
        card's ``components`` supply (null or absent in model_index.json) is one too."""
        if self.text_encoders_:
            return [dict(t) for t in self.text_encoders_]
        found = discover_text_encoders(self.pretrained_path(), self.revision)
        have = {e["name"] for e in found}
        extra = [{"name": n, "tokenizer": "tokenizer" + n[len("text_encoder"):], "kind": encoder_kind(c["class"])}
                 for n, c in sorted(self.components.items()) if n.startswith("text_encoder") and n not in have]
        return found + extra

    def load_components(self, dtype: str = "float32", *, text_only: bool = False) -> dict:
        """The card's ``components``, loaded, as keyword arguments for ``DiffusionPipeline.from_pretrained`` (which
        takes a passed object for a component whose model_index.json entry is null or missing); ``text_only``: the
        tokenizers and text encoders alone (activation extraction)."""
        wanted = {n: c for n, c in self.components.items()  # a component the user replaced is not loaded
                  if (not text_only or n.startswith(("text_encoder", "tokenizer"))) and not self.adapted.component(n)}
        if not wanted:
            return {}
        import diffusers
        import torch
        import transformers

        out = {}
        for name, spec in wanted.items():
            cls = getattr(transformers, spec["class"], None) or getattr(diffusers, spec["class"], None)
            if cls is None:
                raise AuditError(f"model {self.name!r}: components.{name}: no class {spec['class']!r} in "
                                 "transformers or diffusers")
            kw = {k: spec[k] for k in ("subfolder", "revision") if spec.get(k)}
            if isinstance(cls, type) and (issubclass(cls, torch.nn.Module) or cls.__name__.startswith("AutoModel")):
                kw["dtype"] = getattr(torch, dtype)
            try:
                out[name] = cls.from_pretrained(spec["repo"], **kw)
            except (OSError, ValueError) as e:
                raise AuditError(f"model {self.name!r}: components.{name} from {spec['repo']}: {e}") from None
        return out

    def as_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "repo": self.repo, "revision": self.revision,
                "local": self.local, "pipeline": self.pipeline, "defaults": self.defaults, "call": self.call,
                "variant": self.variant, "vae_dtype": self.vae_dtype, "components": self.components,
                "offload": self.offload, "vae_tiling": self.vae_tiling, "sources": self.sources,
                "licence": self.licence, "gated": self.gated,
                **({"kind": self.kind, "target": self.target, **({"source_options": self.source_options}
                                                                  if self.source_options else {})}
                   if not self.has_pipeline else {}),
                # "variant" is the weights variant (fp16 files); the user's LoRAs / components are "adapted"
                **({"adapted": self.adapted.described()} if self.adapted else {})}


def read_model_index(path_or_repo: str, revision: Optional[str] = None) -> dict:
    """A pipeline's model_index.json: a JSON object naming its ``_class_name``, or an AuditError
    naming the file (a local folder is somebody's files: broken or list-shaped ones happen)."""
    p = Path(path_or_repo)
    if p.is_dir():
        f = p / "model_index.json"
        if not f.exists():
            raise AuditError(f"{p}: not a diffusers pipeline folder (no model_index.json)")
    else:
        from huggingface_hub import hf_hub_download

        f = Path(hf_hub_download(path_or_repo, "model_index.json", revision=revision))
    index = read_json(f)
    if not isinstance(index, dict):
        raise AuditError(f"{f}: expected a JSON object (a diffusers model_index.json), got {type(index).__name__}")
    name = index.get("_class_name")
    if not isinstance(name, str) or not name.isidentifier():
        raise AuditError(f"{f}: _class_name {name!r} is not the name of a diffusers pipeline class")
    return index


def check_pipeline_class(name: str, where: str) -> None:
    """Refuse a ``_class_name`` diffusers does not have (it would fail as AttributeError inside
    ``from_pretrained``). Families we know are checked without importing diffusers (torch)."""
    from .families import pipeline_family

    if pipeline_family(name):
        return
    import diffusers

    if name not in dir(diffusers):  # the lazy module lists its names without importing them
        raise AuditError(f"{where}: _class_name {name!r} is not a pipeline class of diffusers "
                         f"{diffusers.__version__}")


def discover_text_encoders(path_or_repo: str, revision: Optional[str] = None) -> list[dict]:
    index = read_model_index(path_or_repo, revision)
    out = []
    for key, spec in sorted(index.items()):
        if not key.startswith("text_encoder") or not isinstance(spec, list) or spec[0] is None:
            continue
        suffix = key[len("text_encoder"):]
        out.append({"name": key, "tokenizer": f"tokenizer{suffix}", "kind": encoder_kind(str(spec[1]))})
    return out


# text-encoder class name prefix (model_index.json) → kind; the first match wins (UMT5 before T5)
_ENCODER_KINDS = (("CLIP", "clip"), ("UMT5", "umt5"), ("T5", "t5"), ("Qwen2_5_VL", "qwen2.5-vl"),
                  ("Qwen2VL", "qwen2-vl"), ("Qwen3VL", "qwen3-vl"), ("Qwen3", "qwen3"), ("Qwen2", "qwen2"),
                  ("Gemma3", "gemma3"), ("Gemma2", "gemma2"), ("Gemma", "gemma"), ("Llama", "llama"),
                  ("Mistral3", "mistral3"), ("Mistral", "mistral"), ("Glm", "glm"), ("ByT5", "byt5"))


def encoder_kind(class_name: str) -> str:
    """The kind of a text encoder from its class name (``CLIPTextModelWithProjection`` → clip,
    ``Qwen2_5_VLForConditionalGeneration`` → qwen2.5-vl, ``LlamaForCausalLM`` → llama); unknown → the
    class name itself (never a wrong guess)."""
    for prefix, kind in _ENCODER_KINDS:
        if class_name.startswith(prefix):
            return kind
    return class_name


@lru_cache(maxsize=1)
def _cards() -> dict[str, dict]:
    return load_yaml(CARDS_FILE)


def _tiny_cards() -> dict[str, dict]:
    try:
        from .tiny import TINY_MODELS
    except ImportError:  # the tiny builders are optional at import time
        return {}
    return TINY_MODELS


def card_names() -> list[str]:
    return sorted({*_cards(), *_tiny_cards()})


def list_models() -> list[dict]:
    from .families import pipeline_family

    out = []
    for name in card_names():
        c = resolve_model(name)
        family = (pipeline_family(c.pipeline) or {}).get("family", "-") if c.pipeline else "-"
        out.append({"name": name, "source": c.source, "pipeline": c.pipeline, "family": family,
                    "licence": c.licence, "gated": c.gated, **c.defaults})
    return out


# every field a card may have (models.yaml header); tiny cards also name their family. Strict: a misspelt field
# would otherwise be dropped without a word (a `sourcse:` or `componets:` that silently does nothing).
CARD_FIELDS = {"repo", "revision", "package", "pipeline", "defaults", "call", "text_encoders", "scorers", "variant",
               "vae_dtype", "notes", "licence", "gated", "components", "sources", "offload", "vae_tiling"}
OFFLOAD_MODES = ("model", "sequential")
COMPONENT_FIELDS = {"repo", "class", "subfolder", "revision"}
SOURCED = {*GENERIC_DEFAULTS, "call", "components", "vae_dtype", "offload", "licence", "gated"}  # what `sources:` can name
# A tiny card's weights are random numbers this package makes from a config: its own licence, nothing to accept.
TINY_LICENCE = "apache-2.0"  # this project's own (pyproject.toml)


def check_card(name: str, spec: dict, tiny: bool = False) -> None:
    """Refuse a card with an unknown field, a component without repo/class, or a source that names no setting."""
    where = f"{CARDS_FILE.name}: card {name!r}"
    if not isinstance(spec, dict):
        raise AuditError(f"{where}: expected a mapping of fields, got {type(spec).__name__}")
    for key in spec:
        if key not in CARD_FIELDS | ({"family"} if tiny else set()):
            raise AuditError(f"{where}: unknown field {key!r}.{did_you_mean(key, sorted(CARD_FIELDS))}")
    for comp, c in (spec.get("components") or {}).items():
        if not isinstance(c, dict) or not {"repo", "class"} <= set(c) or set(c) - COMPONENT_FIELDS:
            raise AuditError(f"{where}: components.{comp}: expected {{repo, class[, subfolder, revision]}}, got {c!r}")
    if spec.get("offload") is not None and spec["offload"] not in OFFLOAD_MODES:
        raise AuditError(f"{where}: offload {spec['offload']!r}: expected one of {', '.join(OFFLOAD_MODES)}")
    if not isinstance(spec.get("vae_tiling", False), bool):
        raise AuditError(f"{where}: vae_tiling {spec['vae_tiling']!r}: expected true or false")
    for key, text in (spec.get("sources") or {}).items():
        if key not in SOURCED:
            raise AuditError(f"{where}: sources.{key}: not a setting.{did_you_mean(key, sorted(SOURCED))}")
        if not isinstance(text, str) or not text.strip():
            raise AuditError(f"{where}: sources.{key}: expected where the setting comes from, got {text!r}")


def _from_card(name: str, spec: dict, tiny: bool = False) -> ModelCard:
    check_card(name, spec, tiny)
    local = None
    if "package" in spec:
        local = str(PACKAGE_DIR / spec["package"])
    return ModelCard(
        name=name, repo=spec.get("repo"), revision=spec.get("revision"), local=local, tiny=tiny,
        pipeline=spec.get("pipeline"), defaults={**GENERIC_DEFAULTS, **spec.get("defaults", {})},
        call=dict(spec.get("call", {})), text_encoders_=tuple(spec.get("text_encoders", ())),
        scorers=tuple(spec.get("scorers", ())), variant=spec.get("variant"), vae_dtype=spec.get("vae_dtype"),
        offload=spec.get("offload"), vae_tiling=bool(spec.get("vae_tiling", False)),
        notes=spec.get("notes"), licence=spec.get("licence", TINY_LICENCE if tiny else None),
        gated=spec.get("gated", False if tiny else None),
        components={k: dict(v) for k, v in (spec.get("components") or {}).items()},
        sources=dict(spec.get("sources") or {}))


def _cardless(card: ModelCard) -> ModelCard:
    """A model without a card runs at its pipeline's own defaults (size, steps, guidance: pipeline_defaults.py),
    each with its source; what the pipeline has no default for keeps the generic value, said so."""
    from dataclasses import replace

    from .pipeline_defaults import pipeline_defaults

    found, sources = pipeline_defaults(card.pretrained_path(), card.revision)
    for key in ("steps", "guidance", "size"):
        sources.setdefault(key, f"no default in the pipeline: the generic {GENERIC_DEFAULTS[key]}")
    return replace(card, defaults={**GENERIC_DEFAULTS, **found}, sources=sources)


def resolve_model(ref: str) -> ModelCard:
    """Turn a card name, ``hf:`` id or local folder into a ModelCard, or explain the problem."""
    ref = ref.strip()
    from .reuse import active

    session = active()
    if session is not None and session.card(ref) is not None:  # a pipeline held in memory (TrackCallback)
        return session.card(ref)
    from .sources import resolve_source

    sourced = resolve_source(ref)  # endpoint:URL, openai:MODEL, python:module:function — no pipeline
    if sourced is not None:
        return sourced
    cards = _cards()
    if ref in cards:
        return _from_card(ref, cards[ref])
    tiny = _tiny_cards()
    if ref in tiny:
        return _from_card(ref, tiny[ref], tiny=True)
    if ref.startswith("hf:"):
        repo, _, rev = ref[3:].partition("@")
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise AuditError(f"model {ref!r}: expected hf:org/repo[@revision]")
        return _cardless(ModelCard(name=repo.replace("/", "--"), repo=repo, revision=rev or None))
    path_str = ref[len("local:"):] if ref.startswith("local:") else ref
    path = Path(path_str).expanduser()
    if path.is_dir():
        if not (path / "model_index.json").exists():
            raise AuditError(f"model {ref!r}: folder {path} has no model_index.json (not a diffusers pipeline)")
        index = read_model_index(str(path))
        check_pipeline_class(index["_class_name"], str(path / "model_index.json"))
        return _cardless(ModelCard(name=path.resolve().name, local=str(path.resolve()), pipeline=index["_class_name"]))
    if ref.startswith(("local:", "./", "/", "~")) or "/" in ref:
        raise AuditError(f"model {ref!r}: no such folder {path}")
    raise AuditError(f"unknown model {ref!r}.{did_you_mean(ref, card_names())} "
                     "Or pass hf:org/repo[@revision] or a local pipeline folder.")


