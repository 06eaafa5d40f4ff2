"""Loading CLIP-style models: open_clip (named, tagged or local) and transformers CLIPModel.

``load_clip(model_cfg, device)`` returns a :class:`ClipModel` with one interface whatever the
backend: ``encode_images(list[PIL]) -> (n, d)`` and ``encode_texts(list[str]) -> (m, d)``
(both L2-normalised float32 tensors), ``n_tokens(text)`` and ``context_length`` (for the
77-token truncation record) and ``logit_scale``; ``applied`` says what the built model really
runs (activation, preprocessing), for records and the manifest.

An open_clip architecture named with a pretrained tag is built with the tag's own config
(:func:`open_clip_build_kwargs`): open_clip 3.3 builds ``ViT-L-14`` + ``openai`` with plain GELU
and only warns, though the weights were trained with QuickGELU.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Mapping

from ..errors import AuditError

CHECKPOINT_NAMES = ("model.safetensors", "open_clip_model.safetensors", "open_clip_model.pt",
                    "open_clip_pytorch_model.bin")


def torch_dtype(name: str | None, device: str):
    """A card's ``dtype`` as a torch dtype. ``auto`` (and a missing dtype): float16 on CUDA, float32
    elsewhere — what OpenAI's ``clip.load`` does (its build_model converts to fp16, ``.float()`` on CPU)."""
    import torch

    if not name or name == "auto":
        return torch.float16 if str(device).startswith("cuda") else torch.float32
    try:
        return {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16,
                "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}[name]
    except KeyError:
        raise AuditError(f"scorer card: unknown dtype {name!r} (float32|float16|bfloat16|auto)") from None


def model_dtype(model_cfg: Mapping[str, Any], device: str):
    """The dtype a card's model section (``model`` or ``options.attribute_model``) loads in on ``device``."""
    return torch_dtype(model_cfg.get("dtype"), device)


def _register_open_clip_config(name: str, config_path: str) -> None:
    """Register a custom architecture JSON file under ``name`` (open_clip names configs by file stem)."""
    p = Path(config_path)
    if not p.exists():
        raise AuditError(f"{p}: open_clip model config not found")
    try:
        cfg = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise AuditError(f"{p}: invalid JSON ({e.msg})") from None
    register_open_clip_config(name, cfg.get("model_cfg", cfg))


def register_open_clip_config(name: str, cfg: Mapping[str, Any]) -> None:
    """Make ``name`` mean architecture ``cfg`` in open_clip's registry, unless it already does.

    The registry is one global of the process that every caller writes into (the shipped mini judge and a
    freshly trained one are both ``mini-judge``), so the check is against what open_clip holds now, never
    against what this function registered last: a remembered registration goes stale the moment another
    caller re-registers the name, and the checkpoint then meets the other architecture."""
    from ..extras import open_clip  # AuditError naming the [open-clip] extra if missing

    cfg = json.loads(json.dumps(dict(cfg)))  # plain JSON types, as open_clip reads them back from the file
    if open_clip.get_model_config(name) == cfg:
        return
    import shutil

    from open_clip import factory

    # open_clip registers configs only from files; the folder is removed once read, and so is its entry in the
    # search path: the registry keeps what it read (a rescan updates it, never clears it), and a scoring leaves
    # no t2i_audit_oc_* folder behind in the temp directory
    tmp = Path(tempfile.mkdtemp(prefix="t2i_audit_oc_"))
    try:
        (tmp / f"{name}.json").write_text(json.dumps(cfg))
        open_clip.add_model_config(tmp)
    finally:
        factory._MODEL_CONFIG_PATHS[:] = [p for p in factory._MODEL_CONFIG_PATHS if Path(p) != tmp]
        shutil.rmtree(tmp, ignore_errors=True)


def open_clip_build_kwargs(arch: str, tag: str | None) -> dict:
    """Keyword arguments for ``open_clip.create_model[_and_transforms](arch, ...)`` that apply
    what pretrained ``tag`` prescribes: its activation and its preprocessing.

    Relies on open_clip 3.3: ``open_clip/pretrained.py:get_pretrained_cfg(model, tag)`` (per-tag
    ``quick_gelu``, ``mean``, ``std``, ``interpolation``, ``resize_mode``) and
    ``open_clip/factory.py:create_model``, which builds the architecture's own ``quick_gelu`` and
    only *warns* on a mismatch with the tag ("QuickGELU mismatch"); ``force_quick_gelu`` fixes it.
    The mean/std/… are passed explicitly too, so a build with ``pretrained=None`` (tests) gets
    exactly the preprocessing the tag would. ``{}`` for a checkpoint file or an unknown tag.
    """
    from ..extras import open_clip  # AuditError naming the [open-clip] extra if missing
    from open_clip.pretrained import get_pretrained_cfg

    if not tag:
        return {}
    name = arch.replace("/", "-")  # as create_model cleans the name before its lookups
    tag_cfg = get_pretrained_cfg(name, str(tag))
    if not tag_cfg:
        return {}
    arch_quick = bool((open_clip.get_model_config(name) or {}).get("quick_gelu", False))
    tag_quick = bool(tag_cfg.get("quick_gelu", False))
    if arch_quick and not tag_quick:  # create_model cannot switch an architecture's QuickGELU off
        raise AuditError(f"open_clip {arch!r} uses QuickGELU but its tag {tag!r} was trained with GELU: "
                         f"name the architecture without '-quickgelu'")
    kw: dict = {"force_quick_gelu": tag_quick}
    for key, arg in (("mean", "image_mean"), ("std", "image_std"),
                     ("interpolation", "image_interpolation"), ("resize_mode", "image_resize_mode")):
        if tag_cfg.get(key) is not None:
            kw[arg] = tuple(tag_cfg[key]) if isinstance(tag_cfg[key], (list, tuple)) else tag_cfg[key]
    return kw


def open_clip_applied(model) -> dict:
    """What an open_clip model really runs: the MLP activation(s) of its transformer blocks
    (``mlp.gelu`` in open_clip/transformer.py ResidualAttentionBlock) and the preprocessing
    config that ``set_model_preprocess_cfg`` stored on ``model.visual``."""
    acts = sorted({type(m).__name__ for n, m in model.named_modules() if n.endswith("mlp.gelu")})
    pp = dict(getattr(getattr(model, "visual", model), "preprocess_cfg", None) or {})
    out: dict = {"activation": acts[0] if len(acts) == 1 else acts}
    for key in ("mean", "std", "interpolation", "resize_mode", "size"):
        if key in pp:
            out[key] = _plain(pp[key])
    return out


def transformers_applied(model, image_processor) -> dict:
    """What a transformers CLIPModel really runs: ``hidden_act`` of each tower and the image
    processor's normalisation and resampling."""
    cfg = model.config
    ip = image_processor
    out: dict = {"activation": {"text": cfg.text_config.hidden_act, "vision": cfg.vision_config.hidden_act},
                 "image_processor": type(ip).__name__}
    for key in ("image_mean", "image_std", "resample", "size", "crop_size"):
        v = getattr(ip, key, None)
        if v is not None:
            out[key] = _plain(v)
    return out


def _plain(v):
    """A JSON-able copy (SizeDict, resampling enums …) for records and the manifest."""
    import dataclasses

    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        v = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items() if x is not None}
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    return str(v)


class ClipModel:
    def __init__(self, backend: str, model, preprocess, tokenizer, context_length: int, device: str,
                 dtype, applied: dict | None = None):
        self.backend, self.model, self.preprocess = backend, model, preprocess
        self.tokenizer, self.context_length, self.device, self.dtype = tokenizer, context_length, device, dtype
        self.applied = dict(applied or {})

    @property
    def logit_scale(self) -> float:
        ls = getattr(self.model, "logit_scale", None)
        return float(ls.exp().item()) if ls is not None else 100.0

    def n_tokens(self, text: str) -> int:
        """Token count of ``text`` (for truncation flags); memoised: foils repeat texts a lot."""
        cache = self.__dict__.setdefault("_n_tokens_cache", {})
        if text not in cache:
            cache[text] = self._count_tokens(text)
        return cache[text]

    def _count_tokens(self, text: str) -> int:
        if self.backend == "open_clip":
            enc = getattr(self.tokenizer, "encode", None)
            if enc is not None:
                return len(enc(text)) + 2  # + start/end tokens
            ids = self.tokenizer([text], context_length=10_000)[0]
            return int((ids != 0).sum())
        return len(self.tokenizer(text, truncation=False)["input_ids"])

    def encode_images(self, images):
        import torch

        with torch.no_grad():
            if self.backend == "open_clip":
                x = torch.stack([self.preprocess(im) for im in images]).to(self.device, self.dtype)
                f = self.model.encode_image(x)
            else:
                px = self.preprocess(images=list(images), return_tensors="pt")["pixel_values"]
                f = self.model.get_image_features(pixel_values=px.to(self.device, self.dtype))
                f = getattr(f, "pooler_output", f)
        f = f.float()
        return f / f.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    def encode_texts(self, texts, batch_size: int = 256):
        import torch

        outs = []
        with torch.no_grad():
            for i in range(0, len(texts), batch_size):
                chunk = list(texts[i:i + batch_size])
                if self.backend == "open_clip":
                    ids = self.tokenizer(chunk).to(self.device)
                    f = self.model.encode_text(ids)
                else:
                    tok = self.tokenizer(chunk, padding=True, truncation=True,
                                         max_length=self.context_length, return_tensors="pt")
                    f = self.model.get_text_features(**{k: v.to(self.device) for k, v in tok.items()})
                    f = getattr(f, "pooler_output", f)
                outs.append(f.float())
        f = torch.cat(outs)
        return f / f.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def load_clip(model_cfg: Mapping[str, Any], device: str = "cpu") -> ClipModel:
    backend = model_cfg.get("backend", "open_clip")
    dtype = model_dtype(model_cfg, device)
    mid = str(model_cfg.get("id"))
    if backend == "open_clip":
        from ..extras import open_clip  # AuditError naming the [open-clip] extra if missing

        pretrained = model_cfg.get("pretrained")
        folder = Path(mid).expanduser()
        if folder.is_dir():  # a local folder as the id: open_clip's own layout or the mini-judge one
            if (folder / "open_clip_config.json").exists():
                mid, pretrained = f"local-dir:{folder}", None
            else:
                cfg_file = folder / "config.json"
                ckpt = next((folder / n for n in CHECKPOINT_NAMES if (folder / n).exists()), None)
                if not cfg_file.exists() or ckpt is None:
                    raise AuditError(f"{folder}: not an open_clip model folder (needs open_clip_config.json, "
                                     f"or config.json and one of {', '.join(CHECKPOINT_NAMES)})")
                mid = folder.name
                _register_open_clip_config(mid, str(cfg_file))
                pretrained = str(ckpt)
        elif model_cfg.get("config"):
            _register_open_clip_config(mid, model_cfg["config"])
        if pretrained and model_cfg.get("local") and not Path(str(pretrained)).exists():
            raise AuditError(f"{pretrained}: local open_clip checkpoint not found")
        tag_kwargs = open_clip_build_kwargs(mid, pretrained)  # {} for a checkpoint file or a folder
        model, _, preprocess = open_clip.create_model_and_transforms(mid, pretrained=pretrained, device=device,
                                                                     **tag_kwargs)
        model = model.to(device=device, dtype=dtype).eval()
        tokenizer = open_clip.get_tokenizer(mid)
        ctx = int(getattr(tokenizer, "context_length", 77) or 77)
        applied = {**open_clip_applied(model), "from_tag": bool(tag_kwargs)}
        return ClipModel("open_clip", model, preprocess, tokenizer, ctx, device, dtype, applied)
    if backend == "transformers":
        from transformers import AutoProcessor, CLIPModel

        rev = model_cfg.get("revision") or None
        kw = {} if model_cfg.get("local") else {"revision": rev}
        model = CLIPModel.from_pretrained(mid, dtype=dtype, **kw).to(device).eval()
        proc = AutoProcessor.from_pretrained(mid, **kw)
        tok = proc.tokenizer
        ctx = int(model.config.text_config.max_position_embeddings)
        return ClipModel("transformers", model, proc.image_processor, tok, ctx, device, dtype,
                         transformers_applied(model, proc.image_processor))
    raise AuditError(f"scorer card: unknown CLIP backend {backend!r} (open_clip|transformers)")
