"""The Python API that the CLI wraps one to one (for notebooks and scripts).

    from t2i_audit import api
    records = api.expand_suites(["prompts/colors.yaml"])
    run_dir = api.run_audit(api.RunConfig(model="tiny-sd", prompts=["prompts/colors.yaml"], limit=20))

``run_audit`` is every stage in order — prompts, generate, score, probe, report — each reading
and writing files in one run directory, each skipping work already on disk. ``model`` may also be a hosted model
(``endpoint:URL``, ``openai:MODEL``), ``python:module:function`` or the sampling function itself
(``RunConfig(model=my_sampler, ...)``: t2i_audit/sources/callable.py); ``judge(images, prompts)`` gives the judges'
verdicts on your own images without a run (t2i_audit/judge.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import json
import platform
import sys
import time
from pathlib import Path
from typing import Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import AuditError
from .prompts import expand_files, sample_records, stable_hash
from .ownership import claim_output_dir
from .resume import settings_id
from .rundir import RunDir, RunLock, atomic_write_json, atomic_write_jsonl, atomic_write_text
from .safeload import load_yaml

STAGES = ("prompts", "generate", "score", "probe", "report")
LIBRARIES = ("t2i-audit", "torch", "diffusers", "transformers", "accelerate", "open_clip_torch", "numpy",
             "scikit-learn", "scipy", "pillow")


class RunConfig(BaseModel):
    """Everything that determines a run's output (plus where it goes)."""

    model_config = ConfigDict(extra="forbid")
    model: str
    prompts: list[str] = Field(min_length=1)
    limit: Optional[int] = Field(default=None, gt=0)
    images_per_prompt: int = Field(default=1, gt=0)
    seed: int = 0
    batch_size: int = Field(default=4, gt=0)
    device: str = "auto"
    dtype: Optional[Literal["float32", "float16", "bfloat16"]] = None  # None: the card's
    steps: Optional[int] = Field(default=None, gt=0)
    guidance: Optional[float] = None
    size: Optional[int] = Field(default=None, gt=0)
    scorers: Optional[list[str]] = None  # None: the default set for the suite's categories
    probe_model: Optional[str] = None  # None: the generating model
    stages: list[str] = list(STAGES)
    out: Optional[str] = None
    # how the GPU makes the images, not what they show (generate.py): torch.compile of the denoiser, CPU
    # offload ("none" | "model" | "sequential"; None: the card's when the weights do not fit), tiled VAE decode
    compile: bool = False
    offload: Optional[Literal["none", "model", "sequential"]] = None
    vae_tiling: Optional[bool] = None
    # what the user changed in the model (t2i_audit/variants): LoRAs `PATH_OR_REPO[:SCALE]` applied in order, and
    # pipeline components replaced from a folder or .safetensors file; their files' sha256 enter the identity
    loras: list[str] = []
    components: dict[str, str] = {}
    # hosted models (t2i_audit/sources/hosted.py): requests in flight (never changes what is made), and the server
    # of `openai:MODEL` (another server is another model: part of the identity, when given)
    concurrency: int = Field(default=4, gt=0)
    base_url: Optional[str] = None

    @field_validator("model", mode="before")
    @classmethod
    def _callable_model(cls, v):
        """``model=fn``: a lab's sampler handed over in memory, named ``python:module:qualname`` (sources/callable.py)."""
        if callable(v):
            from .sources.callable import reference

            return reference(v)
        return v
    # the model's name in reports, comparisons and boards (default: the card's; for images:DIR the folder's), and
    # the layout of an images:DIR folder (t2i_audit/sources/layouts; None: detected)
    name: Optional[str] = Field(default=None, min_length=1)
    layout: Optional[str] = None

    @field_validator("loras")
    @classmethod
    def _lora_specs(cls, v: list[str]) -> list[str]:
        from .variants import split_scale

        for spec in v:
            try:
                split_scale(spec)  # the syntax alone; files are found when the run resolves its variant
            except AuditError as e:
                raise ValueError(str(e)) from None
        return v

    @field_validator("components")
    @classmethod
    def _component_names(cls, v: dict[str, str]) -> dict[str, str]:
        from .variants import split_component

        for name, path in v.items():
            try:
                split_component(f"{name}={path}")
            except AuditError as e:
                raise ValueError(str(e)) from None
        return v

    def variant(self):
        """The LoRAs and components of ``loras`` / ``components``, resolved (files found and hashed)."""
        from .variants import resolve

        return resolve(self.loras, self.components)

    def fingerprint(self, card=None) -> str:
        """Hash of what changes the output (not where it goes, not which stages run now).

        Hashed with the card's defaults filled in (steps, guidance, size, dtype), as run.yaml
        records them: a fresh run and its `run --config RUN/run.yaml` resume share one fingerprint,
        and so do `--steps 30` and no --steps where the card's default is 30. Runs made before this
        hashed the unfilled settings: ``default_run_dir`` still finds them under their old name.
        """
        return self._filled(card)._hash()

    def folder_key(self, card=None) -> str:
        """The hash a default run folder is named by: the fingerprint without ``images_per_prompt``, so the same
        command with a larger ``-n`` finds the run it made and extends it (the images made stay, each with its own
        seed) instead of starting a new folder."""
        return self._filled(card)._hash(exclude={"images_per_prompt"})

    def _filled(self, card=None) -> "RunConfig":
        from .models import resolve_model

        filled = {**self.model_dump(), **resolved_settings(self, card or resolve_model(self.model))}
        # validated again so a card's ``guidance: 1`` hashes as the 1.0 that run.yaml reads back
        return RunConfig.model_validate(filled)

    def _hash(self, exclude: frozenset | set = frozenset()) -> str:
        return stable_hash({**self.dump(exclude=NOT_IDENTITY | VARIANT | set(exclude)),
                            **self.variant().identity()})[:6]

    def dump(self, *, exclude: frozenset | set = frozenset()) -> dict:
        """The settings as run.yaml, fingerprints and identities hold them: those of WHEN_SET only when set, so a
        run made before they existed keeps its fingerprint, identity and run.yaml."""
        return {k: v for k, v in self.model_dump(exclude=set(exclude)).items() if not (k in WHEN_SET and v is None)}


# where a run goes, which stages run now, on which device and how many at once: none changes what is made
# (a resume keeps the batch size it was planned with: generate._keep_recorded_plan)
NOT_IDENTITY = {"out", "stages", "device", "batch_size", "compile", "offload", "vae_tiling", "concurrency"}
# settings that enter run.yaml and identities only when given (RunConfig.dump): the model's name, a folder's layout,
# the server of `openai:MODEL` (another server is another model)
WHEN_SET = {"name", "layout", "base_url"}
# the variant enters identities by content (Variant.identity: sha256 and scale), not by path, and only when
# there is one: a run without LoRAs or components keeps the fingerprint and identity it always had
VARIANT = {"loras", "components"}


def prompt_digest(records: list[dict], recorded: Optional[str] = None) -> str:
    """The prompts by content — the whole records (categories, questions, slots, splits …), canonically
    serialised, in order: `--prompts ./x.yaml` and `x.yaml` are one set, a suite edited in place (a category or
    a question changed, texts the same) another. ``recorded``: the digest a folder recorded; one recorded
    before digests covered the whole records (ids and texts only) is kept when those still match."""
    canonical = json.dumps(records, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    digest = f"{len(records)} prompts, content sha256 {hashlib.sha256(canonical.encode()).hexdigest()[:16]}"
    if recorded is not None and recorded != digest:
        lines = "\n".join(f"{r['id']}\t{r.get('text', '')}" for r in records)
        if recorded == f"{len(records)} prompts, sha256 {hashlib.sha256(lines.encode()).hexdigest()[:16]}":
            return recorded
    return digest


def run_identity(cfg: RunConfig, card, records: list[dict], recorded: Optional[dict] = None) -> dict:
    """The settings that determine what a run folder holds, as its marker records them (ownership.py): the
    resolved settings (the card's defaults filled in, as in run.yaml and the fingerprint, so a
    `run --config RUN/run.yaml` resume matches) with the prompts by content. Not ``images_per_prompt``:
    more samples extend a run (the images made stay, each with its own seed), as `-n` always did."""
    filled = RunConfig.model_validate({**cfg.model_dump(), **resolved_settings(cfg, card)})
    return {**filled.dump(exclude=NOT_IDENTITY | VARIANT | {"prompts", "images_per_prompt"}),
            **cfg.variant().identity(), "prompts": prompt_digest(records, (recorded or {}).get("prompts"))}


def recorded_settings(root: "Path | str") -> Optional[dict]:
    """The settings a run folder's marker records (None: new folder, or none recorded)."""
    from .ownership import folder_maker

    maker = folder_maker(root) if Path(root).is_dir() else None
    return maker.settings if maker is not None else None


def chosen_scorers(cfg: RunConfig, card) -> Optional[list[str]]:
    """The scorers `run` scores with: ``--scorer``, else the model card's (None: the defaults per category)."""
    return cfg.scorers if cfg.scorers is not None else (list(card.scorers) or None)


def refuse_fewer_samples(run: RunDir, cfg: RunConfig) -> None:
    """A run that holds N images per prompt is never continued with fewer: images.jsonl would be rewritten
    without the others (and run.yaml would say fewer). Refused before anything is written."""
    made = max((r["sample"] for r in run.read_images(merging=True) + run.read_image_shards()), default=-1) + 1
    if cfg.images_per_prompt < made:
        raise AuditError(f"{run.root}: holds {made} images per prompt; --images-per-prompt/-n "
                         f"{cfg.images_per_prompt} would drop the records of the others from images.jsonl — rerun "
                         f"with -n {made} (or more, to add images) to continue it, or choose another --out")


def load_config(path: str | Path, **overrides) -> RunConfig:
    p = Path(path)
    if not p.is_file():
        raise AuditError(f"{p}: config file not found")
    data = load_yaml(p) or {}
    if not isinstance(data, dict):
        raise AuditError(f"{p}: expected a mapping of run settings")
    data.update({k: v for k, v in overrides.items() if v is not None})
    return make_config(data, where=str(p))


def make_config(data: dict, where: str = "run config", schema: type = RunConfig):
    """``data`` as a ``schema`` (RunConfig; the track's TrackConfig), every problem located at ``where``."""
    try:
        cfg = schema.model_validate(data)
    except ValidationError as e:
        # a field validator's AuditError text arrives as pydantic's "Value error, <text>"
        msgs = [f"{where}: {'.'.join(map(str, err['loc']))}: " + ("unknown setting" if err["type"] == "extra_forbidden"
                                                                  else err["msg"].removeprefix("Value error, "))
                for err in e.errors()]
        raise AuditError("\n".join(msgs)) from None
    if schema is not RunConfig:
        return cfg
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise AuditError(f"{where}: stages: unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGES)}")
    return cfg


def expand_suites(paths: list[str], limit: Optional[int] = None, seed: int = 0) -> list[dict]:
    # a .jsonl holds ready PromptRecords (`prompts import` / `prompts export`): used as they are
    suites = [p for p in paths if not str(p).endswith(".jsonl")]
    records = expand_files(suites) if suites else []
    if len(suites) < len(paths):
        from .importers import read_prompt_records

        for p in paths:
            if str(p).endswith(".jsonl"):
                records += read_prompt_records(p)
    _refuse_repeated_prompts(records, paths)
    return sample_records(records, limit, seed) if limit else records


def _refuse_repeated_prompts(records: list[dict], paths: list[str]) -> None:
    """A prompt given twice (a suite and a file exported from it, one suite named twice) would be generated,
    scored and counted twice, and its run's own readers refuse the repeated id later: said now, before any work."""
    first: dict[str, int] = {}
    for i, r in enumerate(records):
        if r["id"] in first:
            raise AuditError(f"--prompts {' '.join(map(str, paths))}: prompt {r['id']} ({r.get('text', '')!r}) is "
                             "given twice (the same suite named twice, or a suite and a .jsonl exported from it); "
                             "give each prompt once")
        first[r["id"]] = i


def default_run_dir(cfg: RunConfig, card=None, *, command: str = "run", settings: Optional[dict] = None) -> Path:
    """``runs/<model>_<suites>_<hash6>``: the hash of everything that changes what the folder holds. A run
    made by another command (``select``) is named by that command and its own settings, never like a
    plain run of the same model and prompts (it would land in that run's folder)."""
    suites = "+".join(Path(p).stem for p in cfg.prompts)
    model = (cfg.name or cfg.model).replace("hf:", "").replace("/", "--").replace("@", "-").strip(".-") or "model"
    if not cfg.name and cfg.model.startswith(("endpoint:", "openai:", "python:")):  # a URL or module: the card's name
        from .models import resolve_model

        model = (card or resolve_model(cfg.model)).name.replace("/", "--").replace("@", "-").replace(":", "-")
    if command != "run":
        if settings is None:
            raise ValueError(f"default_run_dir: a {command} run is named by its settings; pass settings=")
        return Path("runs") / f"{model}_{suites}_{command}_{settings_id(settings)[:6]}"
    root = Path("runs") / f"{model}_{suites}_{cfg.folder_key(card)}"
    if root.exists():
        return root
    # runs made before: named by the fingerprint with -n in it (the same command with a smaller -n made the run
    # this one extends), or, before the card's defaults were filled in, by the unfilled hash: rerunning the
    # command resumes the run there rather than starting over
    legacy = [f"{model}_{suites}_{cfg.model_copy(update={'images_per_prompt': n}).fingerprint(card)}"
              for n in range(cfg.images_per_prompt, 0, -1)] + [f"{model}_{suites}_{cfg._hash()}"]
    return next((root.with_name(name) for name in legacy if root.with_name(name).exists()), root)


def resolve_model_for(cfg: RunConfig):
    """The card a run of ``cfg`` uses: its model resolved, and for a source without a pipeline what the config adds
    to it (``base_url``), its settings checked (sources.check_config)."""
    from .models import resolve_model

    card = resolve_model(cfg.model)
    if not card.has_pipeline:  # a hosted model or a lab's sampler: settings its API cannot take, said now
        from .sources import check_config

        return check_config(card, cfg)
    if cfg.base_url:
        raise AuditError(f"--base-url {cfg.base_url}: only for --model openai:MODEL")
    return card


def library_versions() -> dict[str, Optional[str]]:
    out = {"python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            out[lib] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            out[lib] = None
    return out


def named_card(cfg: RunConfig, card):
    """``card`` as ``cfg`` names it (``name``) and, for a folder of images, reads it (``layout``)."""
    from dataclasses import replace

    if cfg.layout is not None:
        if card.kind != "images":
            raise AuditError(f"layout {cfg.layout!r}: a layout belongs to images read from a folder (run --images "
                             f"DIR), not to model {cfg.model!r}")
        card = replace(card, source_options={**card.source_options, "layout": cfg.layout})
    return replace(card, name=cfg.name) if cfg.name else card


def resolved_settings(cfg: RunConfig, card) -> dict:
    d = card.defaults
    return {"steps": cfg.steps or d["steps"], "guidance": d["guidance"] if cfg.guidance is None else cfg.guidance,
            "size": cfg.size or d["size"], "dtype": cfg.dtype or d["dtype"]}


def prepare_run(cfg: RunConfig, card, records: list[dict], *, root: Optional[Path] = None,
                resume_argv: Optional[list[str]] = None) -> RunDir:
    """Lay out the run directory (``root``, default ``cfg.out`` or the default name): run.yaml, manifest,
    prompts.jsonl (validated records). ``resume_argv``: the command (without ``--out``) that continues this
    run, for a run another command than ``run`` makes (``verify`` and a refused claim advise it)."""
    run = RunDir(root or cfg.out or default_run_dir(cfg, card))
    if run.prompts.exists():
        old = [r["id"] for r in run.read_prompts()]
        if old != [r["id"] for r in records]:
            raise AuditError(f"{run.root}: this run directory holds other prompts (made by another config); "
                             "choose another --out or remove it")
    else:
        atomic_write_jsonl(run.prompts, records)
    variant = cfg.variant()
    # absolute paths for the variant's files (a `run --config RUN/run.yaml` from elsewhere finds them); none: as before
    # a pipeline's run.yaml never names the settings of hosted models
    unused = {"concurrency"} if card.has_pipeline else set()
    resolved = {**cfg.dump(exclude=VARIANT | unused), **(variant.as_config() if variant else {}),
                **resolved_settings(cfg, card), "out": str(run.root)}
    atomic_write_text(run.config, yaml.safe_dump(resolved, sort_keys=False))
    manifest = run.read_manifest()
    manifest.setdefault("created_utc", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    manifest.update({"fingerprint": cfg.fingerprint(card), "model": card.as_dict(), "versions": library_versions(),
                     "command": sys.argv, "suites": sorted({r["suite"] for r in records})})
    if resume_argv is not None:
        manifest["resume_argv"] = list(resume_argv)
    manifest.setdefault("stages", {})["prompts"] = {"status": "done", "prompts": len(records),
                                                    "categories": sorted({r["category"] for r in records})}
    from .finished_files import FINISHED, complete_lines

    manifest.setdefault(FINISHED, {})["prompts.jsonl"] = complete_lines(run.prompts.read_bytes())  # every reader checks
    atomic_write_json(run.manifest, manifest)
    return run


def _stage_module(name: str):
    """Import a stage's package; stages that are not installed are reported, not crashed on."""
    try:
        return importlib.import_module(f"t2i_audit.{name}")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith(f"t2i_audit.{name}"):
            return None
        raise


def run_audit(cfg: RunConfig, *, progress: bool = True) -> Path:
    """Run every stage of ``cfg.stages`` in order; return the run directory."""
    from .generate import GenSettings, generate_images, resolve_device
    from .processes import process_state

    # validate everything before the first byte is written
    card = named_card(cfg, resolve_model_for(cfg))
    records = expand_suites(cfg.prompts, cfg.limit, cfg.seed)
    variant = cfg.variant()  # every file found and hashed, then checked against the model: before any claim
    if variant:
        from .quiet import no_library_bars
        from .variants.check import check_variant

        with no_library_bars():  # it loads the base's components to check shapes: our progress is said, not theirs
            card = check_variant(card, variant)
    if card.has_pipeline or "score" in cfg.stages:
        device = resolve_device(cfg.device)
        state = process_state(device)  # created once; every stage shares its work between processes
    else:  # a hosted model's or a sampler's images alone: requests and files, no torch to import (seconds saved)
        device, state = ("cpu" if cfg.device == "auto" else cfg.device), OneProcess()
    run = RunDir(cfg.out or default_run_dir(cfg, card))
    # a new or empty folder, or a run this command made with these settings: never write over someone's files
    identity = run_identity(cfg, card, records, recorded_settings(run.root))
    if not card.has_pipeline:  # a folder's images are read, checked and hashed here: their sha256 is the run's
        from .sources import source_identity

        suite = expand_suites(cfg.prompts) if cfg.limit else None  # images of prompts --limit left out: not used
        identity.update(source_identity(card, records, cfg.images_per_prompt, run.root, suite=suite,
                                        progress=progress))
    # the judges checked after the user's own inputs (a folder's layout, its images): those are named first
    preflight(cfg, card, records, device, progress=progress and state.is_main_process)
    claim_output_dir(run.root, "run", command="run", settings=identity)
    with RunLock(run.root, state.process_index):
        refuse_fewer_samples(run, cfg)
        if state.is_main_process:
            prepare_run(cfg, card, records)
        state.wait_for_everyone()
        if "generate" in cfg.stages:
            s = resolved_settings(cfg, card)
            gen = GenSettings(steps=s["steps"], guidance=s["guidance"], size=s["size"], dtype=s["dtype"],
                              device=device, batch_size=cfg.batch_size, images_per_prompt=cfg.images_per_prompt,
                              seed=cfg.seed, compile=cfg.compile, offload=cfg.offload, vae_tiling=cfg.vae_tiling,
                              concurrency=cfg.concurrency)
            with _recorded(run, "generate", state.is_main_process):
                generate_images(run, records, card, gen, state=state, progress=progress)
        main = state.is_main_process
        categories = {r["category"] for r in records}
        if "score" in cfg.stages:
            chosen = chosen_scorers(cfg, card)
            with _recorded(run, "score", main):  # every process scores its share; the main one merges
                score_stage(run, chosen, categories, device=device, batch_size=score_batch_size(cfg, device),
                            progress=progress, tiny=card.tiny, state=state)
        if "probe" in cfg.stages and not card.has_pipeline:  # every other stage runs; this one cannot
            from .sources import needs_pipeline

            why = needs_pipeline(card, "the probe stage")
            if main:  # said once, -q or not: a stage asked for and not run is never silent
                run.update_stage("probe", status="skipped", why=why)
                print(f"[probe] skipped: {why}", file=sys.stderr)
        elif "probe" in cfg.stages:
            with _recorded(run, "probe", main):  # every process extracts its share; the main one fits
                # probe labels: the scorer deciding each category (t2i_audit.deciding), as the report
                probe_model = cfg.probe_model or cfg.model  # the run's variant applies to the run's own model
                probe_stage(run, probe_model, scorer=None, seed=cfg.seed, device=device, progress=progress,
                            state=state, **({"variant": variant} if variant and probe_model == cfg.model else {}))
        if not main:  # the report reads only files: the main process's
            return run.root
        if "report" in cfg.stages:
            with _recorded(run, "report"):
                # each category's verdicts come from its deciding scorer (t2i_audit.deciding)
                report_stage(run, progress=progress)
    return run.root


class OneProcess:
    """The process state of a run that needs no torch (the generate stage of a source without a pipeline): one
    process, nothing to wait for — Accelerate's PartialState, which imports torch, is not needed to send requests."""

    is_main_process = True
    process_index = local_process_index = 0
    num_processes = 1

    def wait_for_everyone(self) -> None:
        pass


def preflight(cfg: RunConfig, card, records: list[dict], device: str, *, progress: bool = True,
              command: str = "run") -> None:
    """Before anything is written: the judges the score stage will use can load, and the dtype the generate stage
    will run in is said where it is not the one asked for (t2i_audit/preflight.py)."""
    from . import preflight as pf

    say = pf.printer(progress)
    if "generate" in cfg.stages and card.has_pipeline:
        note = pf.dtype_notice(resolved_settings(cfg, card)["dtype"], device)
        if note and say is not None:
            say(note)
    mod = _stage_module("scorers") if "score" in cfg.stages else None
    if mod is not None:
        chosen = chosen_scorers(cfg, card)
        names = chosen if chosen is not None else mod.default_scorers({r["category"] for r in records}, tiny=card.tiny)
        run = RunDir(cfg.out or default_run_dir(cfg, card))  # a rerun whose scores are all written needs no judge
        planned = {(r["id"], s) for r in records for s in range(cfg.images_per_prompt)}
        pf.check_judges([n for n in names if not pf.scored_already(run, n, planned)], device=device, say=say,
                        command=command)


GPU_SCORE_BATCH = 16  # images a judge sees per forward on an accelerator (scorers/stage.py DEFAULT_BATCH_SIZE)


def score_batch_size(cfg: RunConfig, device: str) -> int:
    """The run's scoring batch: the generation batch on CPU (as always); on an accelerator at least
    GPU_SCORE_BATCH images, so a judge's forward fills the device instead of waiting on 4 images at a time
    (a run keeps the batch its scoring was planned with: scorers/stage.py keep_recorded_plan)."""
    return cfg.batch_size if device == "cpu" else max(cfg.batch_size, GPU_SCORE_BATCH)


@contextlib.contextmanager
def _recorded(run: RunDir, stage: str, main: bool = True):
    """A stage that fails leaves its error in the manifest (what finished stays on disk)."""
    try:
        yield
    except Exception as e:
        if main:  # on a full or read-only disk this write fails too: the stage's own error is the one to tell
            with contextlib.suppress(OSError):
                run.update_stage(stage, status="failed", error=f"{type(e).__name__}: {e}")
        raise


def score_stage(run: RunDir, scorers, categories: set, *, tiny: bool = False, state=None, **kw) -> list[str]:
    mod = _stage_module("scorers")
    if mod is None:
        if state is None or state.is_main_process:
            run.update_stage("score", status="unavailable")
        return []
    names = scorers if scorers is not None else mod.default_scorers(categories, tiny=tiny)
    if names:
        from .scorers.stage import run_score_stage  # the package's wrapper takes no ``state``

        run_score_stage(run, names, state=state, **kw)
    return names


def probe_stage(run: RunDir, model: str, *, state=None, **kw) -> None:
    mod = _stage_module("probes")
    if mod is None:
        if state is None or state.is_main_process:
            run.update_stage("probe", status="unavailable")
        return
    mod.run_probe_stage(run, model=model, state=state, **kw)


def report_stage(run: RunDir, **kw) -> Optional[Path]:
    mod = _stage_module("report")
    if mod is None:
        run.update_stage("report", status="unavailable")
        return None
    return mod.render_report(run, **kw)


def judge(images, prompts, **kw) -> list[dict]:
    """The judges in your own loop: per image, the deciding scorer's verdict, failure types and per-question answers
    (t2i_audit/judge.py; the score stage itself, so equal to a run's verdicts on the same images)."""
    from .judge import judge as _judge

    return _judge(images, prompts, **kw)


def export_prompts(paths: list[str], out: str | Path, limit: Optional[int] = None, seed: int = 0) -> int:
    return atomic_write_jsonl(Path(out), expand_suites(paths, limit, seed))

