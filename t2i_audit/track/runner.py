"""``t2i-audit track OUTPUT_DIR --model BASE --prompts SUITE``: every checkpoint of a training run audited on the
same prompts and seeds as the base model (step 0), in step order, into one track folder (index.py).

Each checkpoint is one normal run (``api.run_audit`` with the checkpoint's ``components`` / ``loras``: their
files' sha256 make it its own run, and ``report`` / ``compare`` / ``verify`` take it), inside one
``reuse.Session``: the base pipeline and the judges are loaded once and each checkpoint's files are switched in
(swap.py). A rerun resumes: finished runs are kept, new checkpoints (training may still be writing) are added,
and a checkpoint whose files changed since its run was made is refused for that run and named.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

from pydantic import ConfigDict, Field, create_model

from ..api import RunConfig
from ..errors import AuditError
from . import index as ix

RUN_STAGES = ["prompts", "generate", "score", "probe", "report"]
PROMPTS = "prompts.jsonl"  # the track's prompts, expanded once


# the settings a track hands to every one of its runs: RunConfig's own definitions (types, defaults, bounds)
SHARED = ("model", "prompts", "limit", "images_per_prompt", "seed", "batch_size", "device", "dtype", "steps",
          "guidance", "size", "scorers", "out")
_RunSettings = create_model("_RunSettings", __config__=ConfigDict(extra="forbid"),
                            **{k: (RunConfig.model_fields[k].annotation, RunConfig.model_fields[k]) for k in SHARED})


class TrackConfig(_RunSettings):
    """What a track measures (every run of it shares it) and how (device, batch size: not identity)."""

    ema: bool = False                          # audit <component>_ema/ where a checkpoint has it
    settle: float = Field(default=10.0, ge=0)  # a checkpoint modified more recently is still being written
    denoiser_samples: int = Field(default=4, ge=0)  # fresh-seed replays per prompt for decodability (0: none)
    chance: Optional[float] = Field(default=None, ge=0, le=1)  # success by chance; None: the base model's
    folds: int = Field(default=5, ge=2)        # decodability's grouped CV folds
    final_step: Optional[int] = Field(default=None, ge=0)  # the final output's training step (no file names it)

    def run_config(self, entry: ix.Entry, root: Path):
        """The run of one entry: this track's settings, the entry's components / LoRAs, its own folder, and the
        track's expanded prompts (``TRACK/prompts.jsonl``: the suite is expanded once, not once per checkpoint; the
        run's identity holds the prompts by content, so it is the identity of a ``run`` with the suite itself)."""
        from ..api import make_config

        data = self.model_dump(include=set(SHARED) - {"prompts", "out"})
        data = {k: v for k, v in data.items() if v is not None}
        return make_config({**data, "prompts": [str(Path(root) / PROMPTS)], "components": dict(entry.components),
                            "loras": list(entry.loras), "stages": RUN_STAGES, "out": str(Path(root) / entry.run)},
                           where=f"track run {entry.label}")


# what changes a track's numbers; not where it goes, on which device, how fast, or how it is analysed
NOT_IDENTITY = {"out", "device", "batch_size", "settle", "chance", "folds", "final_step", "images_per_prompt"}


def track_identity(cfg: TrackConfig, source: str, card, records: list[dict]) -> dict:
    from ..api import prompt_digest, resolved_settings

    return {**cfg.model_dump(exclude=NOT_IDENTITY | {"prompts"}), **resolved_settings(cfg, card),
            "prompts": prompt_digest(records), "source": source}


def default_track_dir(output_dir: Path) -> Path:
    return Path("runs") / f"track_{Path(output_dir).resolve().name}"


def run_track(output_dir: Path | str, cfg: TrackConfig, *, progress: bool = True) -> Path:
    """Audit the base model and every finished checkpoint of ``output_dir`` not audited yet; write the page."""
    from ..api import expand_suites
    from ..models import read_model_index, resolve_model
    from ..ownership import claim_output_dir
    from ..rundir import RunLock
    from .discover import Base, discover

    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise AuditError(f"{output_dir}: training output folder not found")
    card = resolve_model(cfg.model)
    records = expand_suites(cfg.prompts, cfg.limit, cfg.seed)
    root = Path(cfg.out) if cfg.out else default_track_dir(output_dir)
    preflight_track(cfg, card, records, root, progress=progress)  # a judge that cannot load stops the track
    settings = track_identity(cfg, str(output_dir.resolve()), card, records)
    local = Path(card.pretrained_path())
    base = Base.of(read_model_index(card.pretrained_path(), card.revision), local if local.is_dir() else None)
    found = discover(output_dir, base, ema=cfg.ema, settle=cfg.settle)  # refusals (two folders a step) first
    if found.ignored:  # said even under -q: a checkpoint the user expects on the curve is not on it
        print(f"[track] warning: {len(found.ignored)} folder(s) named like checkpoints have no step number in their "
              f"name and are not audited: {', '.join(found.ignored[:10])}{' …' if len(found.ignored) > 10 else ''} "
              "(checkpoint-<integer> and checkpoints/checkpoint_<integer> are)", file=sys.stderr, flush=True)
    claim_output_dir(root, "track", command="track", settings=settings)
    write_prompts(root, records)
    with RunLock(root):
        index = ix.load_index(root)
        index.settings = settings
        index.skipped = [ix.Skip(label=s.label, path=str(s.path), reason=s.reason) for s in found.skipped]
        entries = [ix.Entry(label="base", step=0, order=ix.order_key("base", 0), source=cfg.model, layout="base",
                            run="runs/base")]
        entries += [checkpoint_entry(c, cfg) for c in found.checkpoints]
        for s in found.skipped:
            _say(progress, f"skipped {s.label}: {s.reason}")
        audit_entries(root, cfg, entries, records, index, progress=progress)
        ix.save_index(root, index)
        from .page import write_track_page

        _say(progress, f"page: decodability probes ({cfg.folds}-fold) and success curves of every audited checkpoint")
        write_track_page(root, chance=cfg.chance, folds=cfg.folds, progress=progress)
    return root


def preflight_track(cfg: TrackConfig, card, records: list[dict], root: Path, *, progress: bool) -> None:
    """``run``'s preflight (t2i_audit/preflight.py) once, before the track folder is made: every checkpoint's run
    scores with the same judges, so a judge that cannot load would otherwise fail each of them in turn (each
    "not audited", exit 0). A track resumed after a checkpoint was audited has had its judges: not checked again
    (a rerun that finds nothing new loads none)."""
    from ..api import make_config, preflight
    from ..generate import resolve_device

    resumed = (root / ix.INDEX).is_file() and any(e.status == "done" for e in ix.load_index(root).entries)
    stages = [s for s in RUN_STAGES if not (resumed and s == "score")]
    data = {k: v for k, v in cfg.model_dump(include=set(SHARED) - {"out"}).items() if v is not None}
    preflight(make_config({**data, "stages": stages}, where="track"), card, records, resolve_device(cfg.device),
              progress=progress, command="track")


def checkpoint_entry(c, cfg: TrackConfig) -> ix.Entry:
    """A discovered checkpoint as an index entry (the final output at ``--final-step`` where given)."""
    return ix.Entry(label=c.label, step=cfg.final_step if c.label == "final" else c.step,
                    order=ix.order_key(c.label, c.step), source=str(c.path), layout=c.layout,
                    components={k: str(v) for k, v in c.components.items()}, loras=[str(p) for p in c.loras],
                    ema=c.ema, notes=list(c.notes), run=f"runs/{ix.folder_name(c.label)}",
                    files=ix.files_signature([*c.components.values(), *c.loras]))


def write_prompts(root: Path, records: list[dict]) -> None:
    """``TRACK/prompts.jsonl``, rewritten only where it does not hold exactly these records (the claim has checked
    that a resumed track has these prompts; a hand-edited file is put back)."""
    from ..rundir import atomic_write_bytes, dumps_line

    path = Path(root) / PROMPTS
    data = "".join(dumps_line(r) + "\n" for r in records).encode()
    if not path.is_file() or path.read_bytes() != data:
        atomic_write_bytes(path, data)


def audit_entries(root: Path, cfg: TrackConfig, entries: list, records: list[dict], index: ix.Index, *,
                  progress: bool = True) -> None:
    """Each entry's run (and fresh-seed capture) in order, in one reuse session; the index saved after each."""
    from ..reuse import Session, reusing
    from .swap import switch

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    audited = []
    with reusing(Session(switch=switch)) as held:
        for i, entry in enumerate(entries, 1):
            old = index.entry(entry.label)
            if old is not None and old.status == "done" and _unchanged(old, entry) and _complete(root, old):
                continue
            _say(progress, f"{entry.label} ({i}/{len(entries)}): {entry.source}")
            t0 = time.perf_counter()
            try:
                audit_one(root, cfg, entry, records, progress=progress)
            except AuditError as e:  # this checkpoint cannot be audited (refused, changed files): named, the rest go on
                entry.status, entry.error = "failed", str(e)
                _say(progress, f"{entry.label}: not audited: {e}")
            else:
                entry.status, entry.error = "done", None
            entry.seconds = round(time.perf_counter() - t0, 3)
            audited.append(entry.label)
            index.put(entry)
            ix.save_index(root, index)
    if audited:
        index.sessions.append({"started_utc": started, "audited": audited, "loads": dict(held.loads)})


def audit_one(root: Path, cfg: TrackConfig, entry: ix.Entry, records: list[dict], *, progress: bool) -> None:
    """One entry's run, then its fresh-seed denoiser capture (``cfg.denoiser_samples`` per prompt)."""
    from ..api import run_audit
    from ..models import resolve_model

    run_dir = run_audit(cfg.run_config(entry, root), progress=progress)
    if cfg.denoiser_samples:
        _say(progress, f"{entry.label}: denoiser states of {cfg.denoiser_samples} replays per prompt on fresh seeds "
                       f"({len(records)} prompts; the decodability curves read them)")
        entry.activations = f"activations/{ix.folder_name(entry.label)}"
        card = resolve_model(cfg.model).with_variant(loras=entry.loras, components=entry.components)
        capture_for(run_dir, root / entry.activations, cfg, records, card)


def capture_for(run_dir: Path, folder: Path, cfg: TrackConfig, records: list[dict], card) -> None:
    """The fresh-seed capture of a finished run, with the pipeline the run was made with (held by the session)."""
    from ..generate import effective_dtype, load_pipeline, resolve_device
    from ..rundir import RunDir
    from ..safeload import load_yaml
    from .capture import SAMPLE_OFFSET, capture_denoiser, capture_key, captured

    recorded = load_yaml(RunDir(run_dir).config) or {}
    device = resolve_device(cfg.device)
    dtype, _ = effective_dtype(recorded["dtype"], device)
    s = {k: recorded[k] for k in ("steps", "guidance", "size", "seed")}
    key = capture_key({**s, "dtype": dtype, "call": card.call}, records, card.adapted.key(), cfg.denoiser_samples, SAMPLE_OFFSET)
    if captured(folder, key):
        return
    pipe = load_pipeline(card, device, dtype)
    capture_denoiser(pipe, records, folder, key=key, steps=s["steps"], guidance=s["guidance"], size=s["size"],
                     seed=s["seed"], samples=cfg.denoiser_samples, batch_size=cfg.batch_size, call=card.call)


def _unchanged(old: ix.Entry, new: ix.Entry) -> bool:
    return (old.components, old.loras, old.source, old.files) == (new.components, new.loras, new.source, new.files)


def _complete(root: Path, entry: ix.Entry) -> bool:
    from ..rundir import RunDir

    manifest = RunDir(root / entry.run).read_manifest()
    stages = manifest.get("stages") or {}
    return (all((stages.get(s) or {}).get("status") == "done" for s in ("generate", "score"))
            and (entry.activations is None or (root / entry.activations / "meta.json").is_file()))


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"[track] {msg}", file=sys.stderr, flush=True)
