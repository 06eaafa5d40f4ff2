"""Refuse a variant that cannot fit its model before a run folder is claimed: nothing is written, no weights read.

Every check runs on *skeletons*: the base pipeline's components built from their configs on the meta
device (``accelerate.init_empty_weights``), which costs no weights and no memory at any model size.

* A LoRA on a family without a loader (no ``load_lora_weights``), or without peft.
* A component name the pipeline does not have (model_index.json), a component of another class, or one
  whose weights do not fit: a single file's keys and shapes must equal the base component's (it is loaded
  into that class and config); a folder's weights must match its own config, and every tensor of the base
  component must be there with its shape (a folder may add layers, as an LCM UNet does).
* A LoRA whose keys reach no layer: it is loaded into the skeletons through the same diffusers calls
  ``load_lora_weights`` makes per component — ``ModelMixin.load_lora_adapter(state_dict, prefix=<component>)``
  (diffusers/loaders/peft.py) for a denoiser, the family's ``load_lora_into_text_encoder`` for a text
  encoder — with ``low_cpu_mem_usage=True`` (peft injects meta layers and assigns the LoRA's tensors), and the
  injected peft layers are counted. Any error those calls raise would stop the real load too: refused here.
  Not covered: a family whose ``load_lora_weights`` rewrites the state dict before these calls (FLUX Control
  LoRAs widen the transformer's input): the real load counts its layers again (variants/load.py).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import AuditError, did_you_mean
from . import ComponentSpec, Variant
from .load import adapter_layers, component_entry, library_class, require_peft

CHECK_ADAPTER = "t2i_audit_check"
MAX_LISTED = 4  # keys named in an error, of each kind


def check_variant(card, variant: Variant):
    """``card`` with ``variant`` applied, or a located AuditError saying why it cannot fit."""
    if not variant:
        return card
    from ..models import read_model_index

    root, revision = card.pretrained_path(), card.revision
    index = read_model_index(root, revision)
    pipeline = index["_class_name"]
    names = sorted(k for k, v in index.items() if not k.startswith("_") and isinstance(v, list) and v[0] is not None)
    for c in variant.components:
        if c.name not in names:
            raise AuditError(f"--component {c.name}={c.path}: {pipeline} has no component {c.name!r}."
                             f"{did_you_mean(c.name, names)}")
    if variant.loras:
        import diffusers

        cls = getattr(diffusers, pipeline, None)
        if cls is None or not hasattr(cls, "load_lora_weights"):
            raise AuditError(f"--lora {variant.loras[0].spec}: {pipeline} (model {card.name!r}) has no LoRA loader "
                             "(load_lora_weights): diffusers cannot apply a LoRA to this family")
        require_peft()
    skeletons = _Skeletons(card, variant)
    for c in variant.components:
        check_component(skeletons, c)
    for lora in variant.loras:
        check_lora(skeletons, cls, lora)
    return card.with_variant(variant)


class _Skeletons:
    """Meta-device components of the base pipeline, or of a replacing folder's config, built once each."""

    def __init__(self, card, variant: Variant):
        self.card, self.variant, self._built = card, variant, {}

    def entry(self, name: str) -> tuple[str, str]:
        return component_entry(self.card.pretrained_path(), self.card.revision, name)

    def base(self, name: str):
        return self._get(("base", name), lambda: _skeleton(*self.entry(name), self.card.pretrained_path(), name,
                                                           self.card.revision))

    def current(self, name: str, *, fresh: bool = False):
        """The component as the run will have it: the replacing folder's config, else the base's (``fresh``: a new
        one, not the one kept for later checks)."""
        comp = self.variant.component(name)
        if comp is None or comp.kind == "file":
            return self._get(("base", name), lambda: _skeleton(*self.entry(name), self.card.pretrained_path(), name,
                                                               self.card.revision), fresh)
        return self._get(("folder", name), lambda: _skeleton(*self.entry(name), comp.path, None, None), fresh)

    def _get(self, key, build, fresh: bool = False):
        if fresh:
            return build()
        if key not in self._built:
            self._built[key] = build()
        return self._built[key]


def _skeleton(library: str, class_name: str, source: str, subfolder, revision):
    """The component built from its config on the meta device; None for what is not a torch module."""
    import torch
    from accelerate import init_empty_weights

    cls = library_class(library, class_name, f"component {subfolder or source}")
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        return None
    kw = {k: v for k, v in (("subfolder", subfolder), ("revision", revision)) if v}
    try:
        if library == "transformers":
            config = cls.config_class.from_pretrained(source, **kw)
            with init_empty_weights():
                return cls._from_config(config)
        config = cls.load_config(source, **kw)
        with init_empty_weights():
            return cls.from_config(config)
    except (OSError, ValueError, TypeError) as e:
        raise AuditError(f"{source}{'/' + subfolder if subfolder else ''}: cannot build {class_name} from its config: "
                         f"{e}") from None


# --- components -------------------------------------------------------------------------------
def check_component(skeletons: _Skeletons, comp: ComponentSpec) -> None:
    where = f"--component {comp.name}={comp.path}"
    library, class_name = skeletons.entry(comp.name)
    if comp.kind == "folder":
        named = folder_class(Path(comp.path))
        if named and named != class_name:
            raise AuditError(f"{where}: the folder holds a {named}, the base pipeline's {comp.name} is a {class_name} "
                             "(a component of another architecture)")
    base = skeletons.base(comp.name)
    if base is None:  # a tokenizer or scheduler: its loader is the check
        return
    if comp.kind == "file":
        problems = weight_problems(tensor_shapes(base), aliases(base), file_shapes([Path(comp.path)]))
        if problems:
            raise AuditError(f"{where}: its weights do not fit the base model's {class_name} ({'; '.join(problems)}): "
                             "a component of another architecture")
        return
    own = skeletons.current(comp.name)
    files = weight_files(Path(comp.path))
    if files:
        problems = weight_problems(tensor_shapes(own), aliases(own), file_shapes(files))
        if problems:
            raise AuditError(f"{where}: its weights do not match its own config.json ({'; '.join(problems)})")
    base_shapes, own_shapes = tensor_shapes(base), tensor_shapes(own)
    lost = [k for k in base_shapes if k not in own_shapes][:MAX_LISTED]
    other = [f"{k} {list(own_shapes[k])} instead of {list(base_shapes[k])}" for k in base_shapes
             if k in own_shapes and own_shapes[k] != base_shapes[k]][:MAX_LISTED]
    if lost or other:
        said = ([f"lacks {', '.join(lost)}"] if lost else []) + ([f"has {', '.join(other)}"] if other else [])
        raise AuditError(f"{where}: its config builds a {class_name} that does not fit the pipeline's "
                         f"({'; '.join(said)}): a component of another architecture")


def folder_class(folder: Path) -> str | None:
    """The class a component folder's config.json names (diffusers ``_class_name``, transformers
    ``architectures[0]``), if it names one."""
    from ..safeload import read_json

    config = read_json(folder / "config.json", finite=False)
    if not isinstance(config, dict):
        raise AuditError(f"{folder / 'config.json'}: expected a JSON object (a component's config)")
    if isinstance(config.get("_class_name"), str):
        return config["_class_name"]
    arch = config.get("architectures")
    return arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else None


def weight_files(folder: Path) -> list[Path]:
    """A component folder's safetensors weights (shards included); plain names over a variant's
    (``*.fp16.safetensors``) when both are there."""
    files = sorted(folder.glob("*.safetensors"))
    plain = [f for f in files if len(f.name.split(".")) == 2]
    return plain or files


def tensor_shapes(module) -> dict[str, tuple]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def aliases(module) -> dict[str, set]:
    """Parameter name → every name of the same tensor (tied weights are saved once)."""
    by_id: dict[int, set] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), set()).add(name)
    return {n: names for names in by_id.values() for n in names}


def file_shapes(files: list[Path]) -> dict[str, tuple]:
    from safetensors import safe_open

    out = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as h:
                for k in h.keys():
                    out[k] = tuple(h.get_slice(k).get_shape())
        except Exception as e:  # safetensors raises its own error types for a damaged header
            raise AuditError(f"{f}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    return out


def weight_problems(expected: dict, tied: dict, got: dict) -> list[str]:
    missing = [k for k in expected if k not in got and not (tied.get(k, set()) & set(got))]
    unexpected = [k for k in got if k not in expected]
    shapes = [f"{k} {list(got[k])} instead of {list(expected[k])}" for k in expected
              if k in got and got[k] != expected[k]]
    out = []
    for what, keys in (("missing", missing), ("unexpected", unexpected), ("other shapes", shapes)):
        if keys:
            more = f" and {len(keys) - MAX_LISTED} more" if len(keys) > MAX_LISTED else ""
            out.append(f"{len(keys)} {what}: {', '.join(keys[:MAX_LISTED])}{more}")
    return out


# --- LoRAs ------------------------------------------------------------------------------------
def _no_match(e: Exception) -> bool:
    """peft found no target module: NoMatchingPeftModuleError (peft >= 0.21), a ValueError saying so before."""
    return type(e).__name__ == "NoMatchingPeftModuleError" or (
        isinstance(e, ValueError) and "not found in the base model" in str(e))


def check_lora(skeletons: _Skeletons, cls, lora) -> None:
    """Load the LoRA into the skeletons by diffusers' per-component calls; refuse an error or no layer reached."""
    from transformers import PreTrainedModel

    file = Path(lora.file)
    where = f"--lora {lora.spec}"
    try:
        got = cls.lora_state_dict(str(file.parent), weight_name=file.name, return_lora_metadata=True)
    except (ValueError, KeyError, OSError) as e:
        raise AuditError(f"{where}: {cls.__name__}.lora_state_dict cannot read it: {e}") from None
    state_dict, alphas, metadata = got if len(got) == 3 else (got[0], None, got[1])
    loadable = [c for c in cls._lora_loadable_modules]
    reached: dict[str, int] = {}
    for comp in loadable:
        if not any(k.startswith(f"{comp}.") for k in state_dict):
            continue
        try:
            skeleton = skeletons.current(comp, fresh=True)  # a clean one per LoRA: the check's adapter stays on it
        except AuditError:  # the base pipeline has no such component (e.g. a text encoder it ships without)
            continue
        if skeleton is None:
            continue
        try:
            if isinstance(skeleton, PreTrainedModel):
                cls.load_lora_into_text_encoder(dict(state_dict), network_alphas=alphas, text_encoder=skeleton,
                                                prefix=comp, adapter_name=CHECK_ADAPTER, metadata=metadata,
                                                low_cpu_mem_usage=True)
            else:
                skeleton.load_lora_adapter(dict(state_dict), prefix=comp, network_alphas=alphas,
                                           adapter_name=CHECK_ADAPTER, metadata=metadata, low_cpu_mem_usage=True)
        except Exception as e:  # peft's NoMatchingPeftModuleError, shape or format errors: the real load raises them
            if not _no_match(e):
                raise AuditError(f"{where}: it does not load into {cls.__name__}'s {comp} ({type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else ''})") from None
        reached[comp] = adapter_layers({comp: skeleton}, CHECK_ADAPTER)[comp]
    if not any(reached.values()):
        keys = sorted(state_dict)[:MAX_LISTED]
        raise AuditError(f"{where}: its keys match no layer of {cls.__name__} ({', '.join(loadable)}; first keys: "
                         f"{', '.join(keys) or 'none'}): a LoRA made for another model? (diffusers would load nothing "
                         "and only warn)")
