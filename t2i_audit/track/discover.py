"""Which checkpoints a training run's output folder holds, in step order — decided by their files.

The layouts, as the writers write them (diffusers examples and Accelerate, read at diffusers 58eb52c and
accelerate 16cb6eb):

* ``OUTPUT/checkpoint-<step>/`` is ``accelerator.save_state(os.path.join(args.output_dir, f"checkpoint-{global_step}"))``
  in every diffusers training example. What is in it is the example's ``save_model_hook``:
  - full components: ``unet/`` (examples/text_to_image/train_text_to_image.py and _sdxl.py ``save_model_hook``:
    ``model.save_pretrained(os.path.join(output_dir, "unet"))``), ``unet/`` + ``text_encoder/``
    (examples/dreambooth/train_dreambooth.py), ``transformer/`` + ``text_encoder/`` / ``text_encoder_2/``
    (examples/dreambooth/train_dreambooth_flux.py), and the EMA beside them as ``unet_ema/``
    (train_text_to_image.py: ``ema_unet.save_pretrained(os.path.join(output_dir, "unet_ema"))``; any
    ``<component>_ema/`` is read the same way) — ``--ema`` audits the EMA where there is one;
  - LoRA: ``pytorch_lora_weights.safetensors`` (train_text_to_image_lora.py, train_dreambooth_lora.py,
    train_dreambooth_lora_flux.py …: ``<Pipeline>.save_lora_weights(output_dir, …)``, weight name
    diffusers/loaders/lora_base.py ``LORA_WEIGHT_NAME_SAFE``), text-encoder layers included when trained;
  - Accelerate's own files (accelerate/checkpointing.py ``save_accelerator_state``): ``optimizer.bin``,
    ``scheduler.bin``, ``sampler.bin``, ``scaler.pt`` and, written LAST, ``random_states_<process>.pkl``; and
    for a model no hook took over (a bare training loop), its raw state dict ``model.safetensors`` (``model_1``,
    ``model_2`` … for the second, third prepared model; ``pytorch_model.bin`` without safetensors). Which component
    a raw state dict is, is read from its tensor names against the base's (``model.safetensors`` is the denoiser
    where the base cannot be read).
* ``OUTPUT/checkpoints/checkpoint_<i>/``: ``save_state()`` with ``ProjectConfiguration(automatic_checkpoint_naming
  =True)`` (accelerate/accelerator.py ``save_state``); ``i`` is the save iteration, not the optimisation step.
* ``OUTPUT`` itself, the end of training: a full pipeline (``pipeline.save_pretrained(args.output_dir)``) or
  ``pytorch_lora_weights.safetensors`` (``save_lora_weights(save_directory=args.output_dir)``), labelled
  ``final`` and placed after every checkpoint.

A checkpoint still being written is skipped and named, never audited: an entry ending in ``.tmp`` / ``.part`` /
``.incomplete`` or a staging folder, a component folder without a whole weights file (weight_files.py: a
truncated safetensors file, a torch archive without its end record, a missing shard), Accelerate files without
their ``random_states_*.pkl``, or anything in it modified in the last ``settle`` seconds.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from ..errors import AuditError
from .weight_files import Incomplete, check_weight_file, model_weight_files, tensor_names

SETTLE_SECONDS = 10.0
LORA_FILES = ("pytorch_lora_weights.safetensors", "pytorch_lora_weights.bin")  # lora_base.py LORA_WEIGHT_NAME[_SAFE]
ACCELERATE_FILES = re.compile(r"^(optimizer|scheduler|sampler)(_\d+)?\.bin$|^scaler\.pt$")
RANDOM_STATES = re.compile(r"^random_states_\d+\.pkl$")
RAW_MODEL = re.compile(r"^(model|pytorch_model)(_(\d+))?\.(safetensors|bin)$")
IN_PROGRESS = re.compile(r"(\.tmp|\.part|\.incomplete)$|^\.staging-|^\.tmp")
CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
ACCELERATE_AUTO_DIR = re.compile(r"^checkpoint_(\d+)$")
DENOISERS = ("unet", "transformer", "prior", "decoder")


@dataclass(frozen=True)
class Base:
    """What discovery needs of the base pipeline: its component names (model_index.json) and, where it is a
    local folder, the folder (to read which component a raw state dict is)."""

    components: tuple[str, ...]
    folder: Optional[Path] = None

    @property
    def denoiser(self) -> Optional[str]:
        return next((c for c in DENOISERS if c in self.components), None)

    @classmethod
    def of(cls, model_index: dict, folder: Optional[Path] = None) -> "Base":
        """From the base's model_index.json (its components: the entries naming a library and a class)."""
        names = tuple(k for k, v in model_index.items()
                      if not k.startswith("_") and isinstance(v, list) and len(v) == 2 and v[0] is not None)
        return cls(components=names, folder=Path(folder) if folder is not None else None)


@dataclass
class Checkpoint:
    label: str                 # "checkpoint-200", "checkpoints/checkpoint_3", "final"
    step: Optional[int]        # the number in the folder's name (None: the final output)
    path: Path
    layout: str                # "components" | "lora" | "accelerate" | "pipeline"
    components: dict = field(default_factory=dict)  # component name -> folder or file holding its weights
    loras: list = field(default_factory=list)
    ema: bool = False          # EMA weights were chosen for at least one component
    notes: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"label": self.label, "step": self.step, "path": str(self.path), "layout": self.layout,
                "components": {k: str(v) for k, v in self.components.items()}, "loras": [str(p) for p in self.loras],
                "ema": self.ema, "notes": list(self.notes)}


@dataclass
class Skipped:
    label: str
    path: Path
    reason: str

    def as_dict(self) -> dict:
        return {"label": self.label, "path": str(self.path), "reason": self.reason}


@dataclass
class Discovery:
    checkpoints: list
    skipped: list
    ignored: list = field(default_factory=list)  # folders named like checkpoints whose name gives no step


# named like a checkpoint but no step number (``checkpoint-abc``, ``checkpoint-7.5``, ``checkpoint-final``)
LOOKS_LIKE_CHECKPOINT = re.compile(r"^checkpoints?[-_]", re.IGNORECASE)


def discover(output_dir: Path, base: Base, *, ema: bool = False, settle: float = SETTLE_SECONDS,
             now: Optional[float] = None) -> Discovery:
    """Every checkpoint of ``output_dir`` in step order (the final output last), and the ones skipped with why."""
    output_dir = Path(output_dir)
    now = time.time() if now is None else now
    found: list[tuple[tuple, str, Path, Optional[int]]] = []
    ignored: list[str] = []
    for prefix, folder, pattern in (("", output_dir, CHECKPOINT_DIR),
                                    ("checkpoints/", output_dir / "checkpoints", ACCELERATE_AUTO_DIR)):
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            if not entry.is_dir():
                continue
            m = pattern.match(entry.name)
            if m:
                found.append(((0 if not prefix else 1, int(m.group(1))), prefix + entry.name, entry, int(m.group(1))))
            elif LOOKS_LIKE_CHECKPOINT.match(entry.name) and entry.name != "checkpoints":
                ignored.append(prefix + entry.name)
    found.sort(key=lambda f: f[0])
    _one_folder_a_step(found, output_dir)
    checkpoints, skipped = [], []
    for _, label, path, step in found:
        try:
            _settled(path, path, settle, now)
            ck = read_checkpoint(path, label, step, base, ema=ema)
        except Incomplete as e:
            skipped.append(Skipped(label, path, str(e)))
            continue
        if ck.step is not None and label.startswith("checkpoints/"):
            ck.notes.append("accelerate automatic naming: the number is the save iteration, not the optimisation step")
        checkpoints.append(ck)
    final = _final(output_dir, base, ema=ema, settle=settle, now=now)
    if isinstance(final, Skipped):
        skipped.append(final)
    elif final is not None:
        checkpoints.append(final)
    return Discovery(checkpoints, skipped, ignored)


def _one_folder_a_step(found: list, output_dir: Path) -> None:
    """``checkpoint-10`` and ``checkpoint-00010`` are both step 10: auditing both would put two points at one step
    (and do one checkpoint's work twice). Refused, naming both, since which one training meant is unknown."""
    by_step: dict[tuple, list[str]] = {}
    for order, label, _, _ in found:
        by_step.setdefault(order, []).append(label)
    twice = [(order[1], labels) for order, labels in by_step.items() if len(labels) > 1]
    if twice:
        shown = "; ".join(f"{' and '.join(labels)} are both step {step}" for step, labels in twice[:3])
        raise AuditError(f"{output_dir}: {shown}{' …' if len(twice) > 3 else ''}: keep one folder a step (move the "
                         "others out of the training folder), then rerun")


def read_checkpoint(path: Path, label: str, step: Optional[int], base: Base, *, ema: bool = False) -> Checkpoint:
    """One checkpoint folder's weights by layout; Incomplete when it holds none whole (or is being written)."""
    entries = {p.name: p for p in path.iterdir()}
    _no_leftovers(path)
    states = [n for n in entries if RANDOM_STATES.match(n)]
    if any(ACCELERATE_FILES.match(n) for n in entries) and not states:
        # save_accelerator_state writes the models, optimizer, scheduler, sampler, scaler, then the random states
        raise Incomplete("Accelerate's save_state has not written random_states_*.pkl yet (it writes them last)")
    ck = Checkpoint(label=label, step=step, path=path, layout="components")
    for name in base.components:
        folder, ema_folder = entries.get(name), entries.get(f"{name}_ema")
        chosen = ema_folder if ema and ema_folder is not None and ema_folder.is_dir() else folder
        if chosen is None or not chosen.is_dir():
            continue
        model_weight_files(chosen)  # Incomplete names what is missing
        ck.components[name] = chosen
        if chosen is ema_folder:
            ck.ema = True
        elif ema_folder is not None and ema_folder.is_dir():
            ck.notes.append(f"{name}_ema/ holds EMA weights (--ema audits them)")
    lora = next((entries[n] for n in LORA_FILES if n in entries), None)
    if lora is not None:
        check_weight_file(lora)
        ck.loras.append(lora)
        ck.layout = "lora" if not ck.components else "components+lora"
    if not ck.components and lora is None:
        raw = {n: p for n, p in entries.items() if RAW_MODEL.match(n) and p.is_file()}
        if raw:
            ck.layout = "accelerate"
            ck.components = raw_state_components(raw, base)
    if not ck.components and not ck.loras:
        others = sorted(n for n, p in entries.items() if p.is_dir() and (p / "config.json").is_file())
        hint = f" (folders {', '.join(others)} are not components of the base: {', '.join(base.components)})" \
            if others else ""
        raise Incomplete(f"no weights of a known layout{hint}")
    return ck


def raw_state_components(raw: dict, base: Base) -> dict:
    """Accelerate's raw state dicts (``model.safetensors``, ``model_1.safetensors`` …) → the base component each
    is: the one whose tensor names it shares (≥ 90 % of the union: transformers may leave tied weights out of
    its own files); without a readable base folder, ``model.safetensors`` is the denoiser (the first prepared
    model of a bare loop) and the others cannot be placed."""
    for path in raw.values():
        check_weight_file(path)
    known = {c: k for c in base.components if (k := _base_names(base, c))} if base.folder else {}
    out: dict = {}
    for name, path in sorted(raw.items(), key=lambda kv: int(RAW_MODEL.match(kv[0]).group(3) or 0)):
        names = tensor_names(path)
        if known and names is not None:
            overlap = {c: len(names & k) / len(names | k) for c, k in known.items()}
            best = max(overlap, key=overlap.get)
            if overlap[best] < 0.9:
                raise Incomplete(f"{name}: its tensors match no component of the base ({', '.join(sorted(known))}; "
                                 f"best {best}: {overlap[best]:.0%} of the names)")
            out[best] = path
        elif RAW_MODEL.match(name).group(3) is None and base.denoiser:
            out[base.denoiser] = path
        else:
            raise Incomplete(f"{name}: cannot tell which component it holds (no local base folder to compare its "
                             "tensor names with)")
    return out


def _base_names(base: Base, component: str) -> Optional[set]:
    folder = base.folder / component
    if not folder.is_dir() or not (folder / "config.json").is_file():
        return None
    try:
        return tensor_names(folder)
    except Incomplete:
        return None


def _final(output_dir: Path, base: Base, *, ema: bool, settle: float, now: float):
    """The end-of-training output at the top of ``output_dir``: a full pipeline or LoRA weights (or None)."""
    has_index = (output_dir / "model_index.json").is_file()
    has_lora = any((output_dir / n).is_file() for n in LORA_FILES)
    has_component = any((output_dir / c / "config.json").is_file() for c in base.components)
    if not (has_index or has_lora or has_component):
        return None
    own = [output_dir / n for n in ("model_index.json", *LORA_FILES, *base.components) if (output_dir / n).exists()]
    try:
        for p in own:
            _settled(p, output_dir, settle, now)
        _no_leftovers(output_dir, recursive=False)
        ck = read_checkpoint_top(output_dir, base, ema=ema)
    except Incomplete as e:
        return Skipped("final", output_dir, str(e))
    return ck


def read_checkpoint_top(output_dir: Path, base: Base, *, ema: bool) -> Checkpoint:
    """The final output: its pipeline's model components (their weights replace the base's) or its LoRA; the
    non-model parts (scheduler, tokenizers) must be the base's, or the final is another model, not a step."""
    ck = Checkpoint(label="final", step=None, path=output_dir, layout="pipeline")
    for name in base.components:
        folder = output_dir / name
        ema_folder = output_dir / f"{name}_ema"
        chosen = ema_folder if ema and ema_folder.is_dir() else folder
        if (chosen / "config.json").is_file():
            model_weight_files(chosen)
            ck.components[name] = chosen
            ck.ema = ck.ema or chosen == ema_folder
    lora = next((output_dir / n for n in LORA_FILES if (output_dir / n).is_file()), None)
    if lora is not None:
        check_weight_file(lora)
        ck.loras.append(lora)
        if not ck.components:
            ck.layout = "lora"
    if (output_dir / "model_index.json").is_file() and base.folder is not None:
        differ = _differing_parts(output_dir, base.folder, [c for c in base.components if c not in ck.components])
        if differ:
            raise Incomplete(f"its {', '.join(differ)} differ from the base's: it is another model, not a step of "
                             f"this training (audit it with `t2i-audit run --model {output_dir}`)")
    if not ck.components and not ck.loras:
        raise Incomplete("no weights of a known layout")
    return ck


# keys save_pretrained writes that say where or with which version a file was saved, not what it holds
_VOLATILE = {"is_local", "local_files_only", "name_or_path", "transformers_version"}


def _differing_parts(folder: Path, base_folder: Path, parts: Sequence[str]) -> list[str]:
    """Non-model parts (scheduler, tokenizer …) present in both folders whose files differ: JSON files by content
    (less the keys that record where and with which library version they were saved), others by bytes."""
    out = []
    for part in parts:
        a, b = folder / part, base_folder / part
        if not a.is_dir() or not b.is_dir():
            continue
        files_a = {p.relative_to(a): p for p in a.rglob("*") if p.is_file()}
        files_b = {p.relative_to(b): p for p in b.rglob("*") if p.is_file()}
        if files_a.keys() != files_b.keys() or any(not _same_file(files_a[k], files_b[k]) for k in files_a):
            out.append(part)
    return out


def _same_file(a: Path, b: Path) -> bool:
    if a.suffix == ".json":
        try:
            ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
        except (OSError, ValueError, RecursionError):
            return False
        if isinstance(ja, dict) and isinstance(jb, dict):
            keep = lambda d: {k: v for k, v in d.items() if not k.startswith("_") and k not in _VOLATILE}  # noqa: E731
            return keep(ja) == keep(jb)
        return ja == jb
    return a.read_bytes() == b.read_bytes()


def _no_leftovers(folder: Path, recursive: bool = True) -> None:
    entries = folder.rglob("*") if recursive else folder.iterdir()
    for p in entries:
        if IN_PROGRESS.search(p.name):
            raise Incomplete(f"{p.relative_to(folder)}: a write in progress (or one that was cut short)")


def _settled(path: Path, root: Path, settle: float, now: float) -> None:
    """Incomplete when anything under ``path`` was modified in the last ``settle`` seconds."""
    if settle <= 0:
        return
    newest = path.stat().st_mtime
    if path.is_dir():
        for p in path.rglob("*"):
            try:
                newest = max(newest, p.stat().st_mtime)
            except FileNotFoundError:  # removed while we look (checkpoints_total_limit): still moving
                raise Incomplete(f"{p.relative_to(root)} vanished while being read") from None
    age = now - newest
    if age < settle:
        raise Incomplete(f"modified {max(0.0, age):.1f} s ago (training may still be writing it; settles after "
                         f"{settle:g} s)")
