"""The generation stage: diffusers pipelines, per-image seeds, a fixed batch plan, Accelerate sharding.

Each image gets its own CPU ``torch.Generator`` seeded from (prompt id, sample index, base seed), so
its starting *noise* never depends on batch size, process count or machine. Its *bytes* do: CPU and
GPU kernels round differently for another batch size (measured: a tiny-sd image made in a batch of
2 and remade alone differs on an AVX-512/AMX CPU and not on an AVX2 one), another CPU or another
thread count. So the batches are planned once, from the config alone (:func:`plan_batches`: the
ordered (prompt, sample) list cut every ``batch_size``), and every process, resume and heal runs
whole planned batches, writing only the members that are missing or damaged. Same machine, same
thread count, same config ⇒ the same bytes, whatever the resume history or process count; each
record names its batch. Processes take whole batches (``split_between_processes``), write PNGs
atomically and append their records to their own shard after each batch; the main process merges
the shards into images.jsonl. A kill loses at most the batches in flight: PNG encoding and record
writing run on one background thread (image_writer.BatchWriter) while the next batch is denoised.

GPU options, none of which changes what an image shows: ``compile`` (torch.compile of the denoiser, its
compile time recorded), ``offload`` (accelerate CPU offload when the weights do not fit the GPU) and
``vae_tiling`` (tiled decode for large sizes on small GPUs). The VAE decodes in float32 where a float16
run would overflow it (:func:`vae_decode_dtype`).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import inspect
import io
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Optional

from .errors import AuditError
from .families import pipeline_family
from .models import ModelCard
from .rundir import RunDir, append_jsonl, atomic_write_bytes, atomic_write_jsonl, repair_jsonl

DTYPES = ("float32", "float16", "bfloat16")
BLACK_MAX = 0.02  # an image whose brightest pixel is below this (of 1.0) is flagged "black"


@dataclass
class GenSettings:
    steps: int
    guidance: float
    size: int
    dtype: str
    device: str = "auto"
    batch_size: int = 4
    images_per_prompt: int = 1
    seed: int = 0
    compile: bool = False  # torch.compile the denoiser
    offload: Optional[str] = None  # None: the card's, if the weights do not fit; "none" | "model" | "sequential"
    vae_tiling: Optional[bool] = None  # None: the card's
    concurrency: int = 1  # requests in flight for a hosted model (t2i_audit/sources/hosted.py); a pipeline ignores it


def image_seed(prompt_id: str, sample: int, base_seed: int) -> int:
    """A 63-bit seed from (prompt id, sample, base seed): the same on every machine."""
    digest = hashlib.sha256(f"{prompt_id}:{sample}:{base_seed}".encode()).hexdigest()
    return int(digest[:15], 16)


def plan_batches(prompts: list[dict], images_per_prompt: int, batch_size: int) -> list[list[tuple[dict, int]]]:
    """The run's batches: every (prompt, sample) in order, cut every ``batch_size``.

    A function of the config alone (prompt list, images per prompt, batch size), never of what is
    already on disk or of the process count, so a resumed, healed or sharded run, and the denoiser
    replay, make every image among the same batch-mates as a fresh single-process run.
    """
    if batch_size < 1:
        raise AuditError(f"batch size {batch_size}: must be at least 1")
    items = [(p, k) for p in prompts for k in range(images_per_prompt)]
    return [items[i : i + batch_size] for i in range(0, len(items), batch_size)]


def batch_member(prompt_id: str, sample: int) -> str:
    return f"{prompt_id}/{sample}"


def effective_batch_size(pipeline_class_name: str, batch_size: int) -> tuple[int, Optional[str]]:
    """Batch size 1 for a family whose images depend on their batch-mates, with the reason."""
    if batch_size > 1 and (pipeline_family(pipeline_class_name) or {}).get("batch_dependent"):
        # the pipeline pads a batch to its longest prompt and the denoiser sees that padding unmasked
        # (Kandinsky 5, CogView 4): an image would depend on its batch-mates, so each is made alone
        return 1, f"{pipeline_class_name}: images depend on their batch-mates; batch size 1 used"
    return batch_size, None


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    return check_device(device)


def check_device(device: str) -> str:
    """``device`` when torch knows it and this machine has it; else AuditError before any work (torch's own
    RuntimeError came from deep inside the pipeline, after the run folder was made)."""
    import torch

    try:
        torch.device(device)
    except (RuntimeError, TypeError):
        raise AuditError(f"--device {device}: not a device (auto | cpu | cuda | cuda:N | mps)") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise AuditError(f"--device {device}: CUDA is not available on this machine (use cpu or auto)")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise AuditError(f"--device {device}: MPS is not available on this machine (use cpu or auto)")
    return device


def effective_dtype(dtype: str, device: str) -> tuple[str, Optional[str]]:
    """The dtype actually used, and a note when it differs from the one asked for."""
    if dtype not in DTYPES:
        raise AuditError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if device == "cpu" and dtype == "float16":
        return "float32", "float16 does not run diffusion on CPU: float32 is used (--dtype float32 asks for it)"
    return dtype, None


def silence_loading_bars() -> None:
    """Our own bar shows progress (and --quiet hides it); the libraries' loading bars would bury it and
    ignore --quiet."""
    import transformers
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.disable_progress_bar()
    transformers.utils.logging.disable_progress_bar()


def load_pipeline(card: ModelCard, device: str, dtype: str, *, offload: Optional[str] = None,
                  vae_tiling: Optional[bool] = None):
    """The card's pipeline on ``device`` in ``dtype``; ``pipe.t2i_placement`` says how it was placed (offload,
    VAE tiling, the dtype each component runs in and why)."""
    from .reuse import active

    session = active()
    if session is not None:  # t2i-audit track: the base loaded once, this run's variant switched in
        return session.pipeline(card, device, dtype, offload=offload, vae_tiling=vae_tiling, load=load_pipeline)
    import torch
    from diffusers import DiffusionPipeline

    silence_loading_bars()
    path = card.pretrained_path()
    kw = {"revision": card.revision, "dtype": getattr(torch, dtype)}
    if card.variant and dtype != "float32":  # fp16 files: half the download; never upcast them to fp32
        kw["variant"] = card.variant
    kw.update(card.load_components(dtype))  # components the repo does not ship (models.yaml `components:`)
    if card.adapted:
        from .variants.load import load_replacements

        kw.update(load_replacements(card, dtype))  # --component NAME=PATH: passed as from_pretrained(..., unet=obj)
    try:
        pipe = DiffusionPipeline.from_pretrained(path, **kw)
    except (OSError, ValueError) as e:
        from .quiet import library_message

        raise AuditError(f"model {card.name!r}: cannot load pipeline from {path}: {library_message(e)}") from None
    pipe.set_progress_bar_config(disable=True)
    if card.adapted.loras:  # on the CPU copy, before placement (offload hooks and devices follow the loaded layers)
        from .variants.load import apply_loras

        pipe.t2i_loras = apply_loras(pipe, card.adapted)
    placement = {"offload": place_pipeline(pipe, card, device, offload)}
    vae_dtype, why, ours = vae_decode_dtype(card, pipe, dtype)
    if ours and vae_dtype != dtype:
        decode_vae_in(pipe, vae_dtype)
    placement["dtypes"] = {"denoiser": dtype, "text_encoders": dtype, "vae": vae_dtype, "vae_why": why}
    tiling = card.vae_tiling if vae_tiling is None else vae_tiling
    if tiling:
        if not hasattr(getattr(pipe, "vae", None), "enable_tiling"):
            raise AuditError(f"--vae-tiling: {type(getattr(pipe, 'vae', None)).__name__} has no tiled decode")
        pipe.vae.enable_tiling()
    placement["vae_tiling"] = bool(tiling)
    pipe.t2i_placement = placement
    return pipe


OFFLOADS = ("none", "model", "sequential")


def component_bytes(pipe) -> dict[str, int]:
    """Bytes of the parameters and buffers of each torch component of the pipeline."""
    import torch

    return {name: sum(t.numel() * t.element_size() for t in (*m.parameters(), *m.buffers()))
            for name, m in pipe.components.items() if isinstance(m, torch.nn.Module)} or {"none": 0}


def place_pipeline(pipe, card: ModelCard, device: str, asked: Optional[str]) -> dict:
    """Move the pipeline to ``device``, or CPU-offload it (diffusers ``enable_model_cpu_offload``: one
    component on the GPU at a time; ``enable_sequential_cpu_offload``: one layer at a time) — when asked,
    or when the card names an offload and the weights do not fit the GPU's free memory. Returns what was done.
    Offload moves weights, never changes a result: the same kernels run on the same device."""
    if asked is not None and asked not in OFFLOADS:
        raise AuditError(f"--offload {asked!r}: expected one of {', '.join(OFFLOADS)}")
    sizes = component_bytes(pipe)
    need = sum(sizes.values())
    info: dict = {"weights_gb": round(need / 2**30, 2), "mode": "none"}
    mode = asked or "none"
    if asked is None and card.offload and device.startswith("cuda"):
        import torch

        free, total = torch.cuda.mem_get_info(torch.device(device))
        info.update(free_gb=round(free / 2**30, 2), total_gb=round(total / 2**30, 2))
        if need > 0.9 * free:  # activations and the VAE decode need the rest
            mode, info["reason"] = card.offload, f"model card {card.name!r}: weights do not fit the free GPU memory"
            if mode == "model" and max(sizes.values()) > 0.9 * free:
                mode, info["reason"] = "sequential", f"{info['reason']}, nor does its largest component"
    if mode == "none":
        pipe.to(device)
        return info
    if not device.startswith("cuda"):
        raise AuditError(f"--offload {mode}: CPU offload needs a CUDA device (this run uses {device})")
    index = int(device.split(":")[1]) if ":" in device else None
    if mode == "model":
        pipe.enable_model_cpu_offload(gpu_id=index)
    else:
        pipe.enable_sequential_cpu_offload(gpu_id=index)
    info["mode"] = mode
    return info


def vae_decode_dtype(card: ModelCard, pipe, dtype: str) -> tuple[str, str, bool]:
    """(the dtype the VAE decodes in, why, whether we must make it so). An AutoencoderKL whose config says ``force_upcast`` overflows in
    float16 (the SDXL VAE: NaN / black images); StableDiffusionXLPipeline upcasts it itself
    (pipeline_stable_diffusion_xl.py ``__call__``: ``needs_upcasting = self.vae.dtype == torch.float16 and
    self.vae.config.force_upcast``; families.yaml ``vae_upcast``), PixArt-Σ, SD3, FLUX … never do. So: the
    card's ``vae_dtype`` when it states one; else float32 when a float16 run's VAE asks for it; else the run's."""
    if card.vae_dtype:
        return card.vae_dtype, f"card {card.name!r} vae_dtype", getattr(pipe, "vae", None) is not None
    vae = getattr(pipe, "vae", None)
    if dtype != "float16" or vae is None or not getattr(vae.config, "force_upcast", False):
        return dtype, "the run's dtype", False
    if (pipeline_family(type(pipe).__name__) or {}).get("vae_upcast") == "force_upcast":
        return "float32", f"{type(pipe).__name__} upcasts a force_upcast VAE itself", False
    return "float32", f"the VAE config says force_upcast and {type(pipe).__name__} does not upcast", True


def compile_denoiser(pipe) -> str:
    """torch.compile the pipeline's UNet / transformer in place (``nn.Module.compile``: its class, config and
    hooks stay, so every family lookup and probe sees the same module). Compilation happens at the first call.
    Returns the backend: ``inductor``, or ``$T2I_AUDIT_COMPILE_BACKEND`` (the CPU tests use ``aot_eager``: the
    same dynamo graph without minutes of C++ kernel compilation)."""
    denoiser = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    if denoiser is None:
        raise AuditError(f"--compile: {type(pipe).__name__} has no unet or transformer to compile")
    backend = os.environ.get("T2I_AUDIT_COMPILE_BACKEND") or "inductor"
    denoiser.compile(backend=backend)
    return backend


def compile_seconds() -> float:
    """Seconds torch.compile has spent compiling in this process (dynamo's own timer, every recompile
    included); 0.0 where the counter is missing."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return 0.0
    return float(sum(compilation_time_metrics.get("_compile.compile_inner", [])))


def decode_vae_in(pipe, dtype: str) -> None:
    """Make the VAE decode in ``dtype`` whatever the pipeline's dtype.

    PixArt-Σ's pipeline calls ``self.vae.decode(latents / scaling_factor)`` in the pipeline's dtype
    with no upcast (pipeline_pixart_sigma.py; SDXL's pipeline upcasts when the VAE config says
    ``force_upcast``): its SDXL VAE overflows in float16 and decodes NaN/black images.
    """
    import torch

    vae = getattr(pipe, "vae", None)
    target = getattr(torch, dtype)
    if vae is None or vae.dtype == target:
        return
    vae.to(target)
    decode = vae.decode

    def decode_upcast(z, *args, **kwargs):
        return decode(z.to(target), *args, **kwargs)

    vae.decode = decode_upcast


def _device_name(device: str) -> str:
    import platform

    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return f"{device} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def pixel_digest(img) -> str:
    """8×8 block means per RGB channel of a PIL image, as 384 hex digits: what an image *looks* like.

    The sha256 says whether a file holds the bytes this run encoded; the digest says whether other
    bytes are the same picture. Another CPU, GPU or batch size rounds a few values differently
    (block means within a level or two); a damaged or replaced image moves them far. ``verify``
    uses it to tell one from the other.
    """
    import numpy as np
    from PIL import Image

    rgb = img if img.mode == "RGB" else img.convert("RGB")  # (convert would copy an RGB image whole)
    small = rgb.resize((8, 8), resample=Image.Resampling.BOX)  # BOX: plain block means
    return np.asarray(small, dtype="uint8").tobytes().hex()


def digest_distance(a: str, b: str) -> int:
    """Largest difference, in 8-bit levels, between two pixel digests."""
    import numpy as np

    return int(np.abs(np.frombuffer(bytes.fromhex(a), "uint8").astype(int)
                      - np.frombuffer(bytes.fromhex(b), "uint8").astype(int)).max())


def _to_png(arr) -> tuple[bytes, list[str]]:
    """float HWC in [0, 1] → PNG bytes, with flags for NaN and all-black images."""
    png, flags, _ = _encode(arr)
    return png, flags


def _encode(arr) -> tuple[bytes, list[str], str]:
    """float HWC in [0, 1] → PNG bytes, flags (NaN, all black) and the pixel digest."""
    import numpy as np
    from PIL import Image

    flags = []
    if np.isnan(arr).any():
        flags.append("nan")
        arr = np.nan_to_num(arr, nan=0.0)
    if float(arr.max()) < BLACK_MAX:
        flags.append("black")
    img = Image.fromarray((np.clip(arr, 0, 1) * 255).round().astype("uint8"))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue(), flags, pixel_digest(img)


def _done_items(run: RunDir) -> dict[tuple[str, int], dict]:
    """Records whose PNG is on disk with the recorded bytes, by (prompt id, sample).

    A kill can land between a PNG and its record, and a file can be truncated or altered later
    (a full disk, a sync tool, a hand edit), so a record counts only if its file's sha256 matches:
    a damaged image is regenerated, and its scores follow (the score stage keys on image sha256).
    An image can have several records (images.jsonl, shards of other process counts, a
    regeneration): the last that matches the file wins. Cost: one read + sha256 an image (1,000
    3 KB PNGs: 30 ms; a 3 MB PNG: 3 ms), memoised within a process by ``file_sha256``.
    """
    from .rundir import file_sha256

    candidates: dict[tuple[str, int], list[dict]] = {}
    for rec in run.read_images(merging=True) + run.read_image_shards():  # each checked (t2i_audit.records)
        candidates.setdefault((rec["prompt_id"], rec["sample"]), []).append(rec)
    done = {}
    for key, recs in candidates.items():
        digests: dict[str, Optional[str]] = {}
        for rec in reversed(recs):
            if rec["path"] not in digests:
                try:
                    digests[rec["path"]] = file_sha256(run.root / rec["path"])
                except (FileNotFoundError, NotADirectoryError):
                    digests[rec["path"]] = None
            if digests[rec["path"]] == rec["sha256"]:
                done[key] = rec
                break
    return done


def generate_images(run: RunDir, prompts: list[dict], card: ModelCard, s: GenSettings, *,
                    state=None, progress: bool = True) -> dict:
    """Generate every missing image of ``prompts``; return the stage's counts (main process)."""
    if not card.has_pipeline:  # a folder, a hosted model, a lab's own sampler (t2i_audit/sources)
        from .sources import make_images

        return make_images(run, prompts, card, s, state=state, progress=progress)
    import torch
    from accelerate import PartialState

    device = resolve_device(s.device)
    dtype, dtype_note = effective_dtype(s.dtype, device)
    state = state or PartialState(cpu=device == "cpu")
    rank, world = state.process_index, state.num_processes
    if device == "cuda":
        device = f"cuda:{state.local_process_index}"
    if device == "cpu" and world > 1:  # processes × threads ≤ cores, or everything crawls
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))

    repair_jsonl(run.image_shard(rank))
    done = _done_items(run)
    s, plan_note = _keep_recorded_plan(run, s)
    plan = plan_batches(prompts, s.images_per_prompt, s.batch_size)
    state.wait_for_everyone()  # everyone has read the same "done" before anyone writes

    if state.is_main_process:
        run.mark_unfinished(run.images)
        run.update_stage("generate", status="running", device=device, dtype=dtype, dtype_note=dtype_note,
                         world_size=world, settings=asdict(s), requested=len(prompts) * s.images_per_prompt,
                         reused=len(done), planned_batch_size=s.batch_size,
                         **({"plan_note": plan_note} if plan_note else {}))
        if plan_note and progress:
            print(f"[generate] {plan_note}", file=sys.stderr)
    t_load = time.perf_counter()
    if progress and state.is_main_process and any(_missing(b, done) for b in plan):  # a large model loads for minutes
        print(f"[generate] loading {card.name} ({dtype} on {device})", file=sys.stderr, flush=True)
    pipe = load_pipeline(card, device, dtype, offload=s.offload, vae_tiling=s.vae_tiling) \
        if any(_missing(b, done) for b in plan) else None
    load_seconds = time.perf_counter() - t_load
    if pipe is not None and s.compile:
        backend = compile_denoiser(pipe)
        if state.is_main_process:
            run.update_stage("generate", compile_backend=backend)
    if pipe is not None:
        batch_size, note = effective_batch_size(type(pipe).__name__, s.batch_size)
        if note:
            s = replace(s, batch_size=batch_size)
            plan = plan_batches(prompts, s.images_per_prompt, s.batch_size)
            if state.is_main_process:
                run.update_stage("generate", settings=asdict(s), batch_size_note=note)
    # whole planned batches, even where some members exist: an image is only ever made among its
    # planned batch-mates; only the missing members are written
    work = [(i, batch, missing) for i, batch in enumerate(plan) if (missing := _missing(batch, done))]
    made_now = sum(len(missing) for _, _, missing in work)
    if state.is_main_process and pipe is not None:
        run.update_stage("generate", device_name=_device_name(device), pipeline=type(pipe).__name__,
                         resolved_from=str(pipe.config.get("_name_or_path", "")),
                         batches=len(plan), batches_run_now=len(work), load_seconds=round(load_seconds, 3),
                         placement=getattr(pipe, "t2i_placement", None),
                         **({"loras": pipe.t2i_loras} if getattr(pipe, "t2i_loras", None) else {}))
    with state.split_between_processes(work) as mine:
        timing = _generate_share(run, pipe, card, s, mine, rank, progress and state.is_main_process)
    if state.is_main_process and timing:
        run.update_stage("generate", timing=timing)
    state.wait_for_everyone()
    if not state.is_main_process:
        return {}
    return merge_shards(run, prompts, s.images_per_prompt, made_now=made_now)


def _keep_recorded_plan(run: RunDir, s: GenSettings) -> tuple[GenSettings, Optional[str]]:
    """A run keeps the batch size it was planned with: a resume with another ``--batch-size`` would
    make its remaining images among other batch-mates (other bytes than a fresh run's)."""
    recorded = ((run.read_manifest().get("stages") or {}).get("generate") or {}).get("planned_batch_size")
    if recorded is None or int(recorded) == s.batch_size:
        return s, None
    return replace(s, batch_size=int(recorded)), (
        f"batch size {s.batch_size} asked, {recorded} kept: this run was planned in batches of {recorded} "
        "(images depend on their batch-mates' count); use a new --out for another batch size")


def _missing(batch: list[tuple[dict, int]], done: dict) -> list[int]:
    """Positions in ``batch`` of the members not on disk with their recorded bytes."""
    return [j for j, (p, k) in enumerate(batch) if (p["id"], k) not in done]


def _generate_share(run: RunDir, pipe, card: ModelCard, s: GenSettings, work: list, rank: int,
                    progress: bool) -> dict:
    """Generate this process's batches; PNGs and records are written by one background thread while the
    next batch is denoised. Returns the loop's timing (and torch.compile's cost when compiled)."""
    import torch
    from tqdm.auto import tqdm

    from .image_writer import BatchWriter

    bar = tqdm(total=sum(len(keep) for _, _, keep in work), desc=f"generate {card.label()}", unit="img",
               disable=not progress)
    compiled_before = compile_seconds() if s.compile else 0.0
    batch_seconds: list[float] = []
    t_loop = time.perf_counter()
    with BatchWriter(functools.partial(_write_batch_or_say_disk_full, run, card)) as writer:
        for start, (index, batch, keep) in enumerate(work):
            seeds = [image_seed(p["id"], k, s.seed) for p, k in batch]
            generators = [torch.Generator("cpu").manual_seed(x) for x in seeds]
            t0 = time.perf_counter()
            kwargs, ignored = pipeline_call_kwargs(type(pipe), [p["text"] for p, _ in batch], generators,
                                                   steps=s.steps, guidance=s.guidance, size=s.size,
                                                   output_type="np", call=card.call)
            if ignored and start == 0 and rank == 0:  # recorded, never hidden (e.g. a pipeline without guidance)
                run.update_stage("generate", settings_not_accepted_by_pipeline=ignored)
            out = pipe(**kwargs)
            images = output_images(out)
            if start == 0 and rank == 0 and tuple(images[0].shape[:2]) != (s.size, s.size):
                run.update_stage("generate", size_note=f"{type(pipe).__name__} made {images[0].shape[1]}x"
                                 f"{images[0].shape[0]} px for --size {s.size} (the pipeline's own size rule)")
            batch_seconds.append(time.perf_counter() - t0)
            seconds = batch_seconds[-1] / len(batch)
            nsfw = getattr(out, "nsfw_content_detected", None) or [False] * len(batch)
            members = [batch_member(p["id"], k) for p, k in batch]
            writer.submit([batch[j] for j in keep], [seeds[j] for j in keep], [images[j] for j in keep],
                          [nsfw[j] for j in keep], seconds, rank, s.size,
                          batch_info={"batch": index, "batch_members": members})
            bar.update(len(keep))
    bar.close()
    if not work:
        return {}
    timing = {"loop_seconds": round(time.perf_counter() - t_loop, 3), "batches": len(batch_seconds),
              "first_batch_seconds": round(batch_seconds[0], 3)}
    if len(batch_seconds) > 1:
        timing["later_batch_median_seconds"] = round(sorted(batch_seconds[1:])[(len(batch_seconds) - 2) // 2], 3)
    if s.compile:  # compilation happens inside the first call(s): torch's own timer says how long it took
        timing["compile_seconds"] = round(compile_seconds() - compiled_before, 3)
    return timing


def _write_batch_or_say_disk_full(run: RunDir, card: ModelCard, *args, **kwargs) -> None:
    try:
        _write_batch(run, card, *args, **kwargs)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise AuditError(f"{run.root}: no space left on device while writing images ({e.strerror}); "
                         "every image finished before this batch is kept — free space and rerun the "
                         "same command to resume") from None


@functools.lru_cache(maxsize=None)
def _call_parameters(pipeline_class: type) -> tuple[frozenset, bool]:
    """Names ``__call__`` accepts, and whether it takes ``**kwargs`` (one signature read per class)."""
    params = inspect.signature(pipeline_class.__call__).parameters
    return frozenset(params), any(p.kind is p.VAR_KEYWORD for p in params.values())


def pipeline_call_kwargs(pipeline_class: type, prompts: list, generators, *, steps: int, guidance: float,
                         size: int, output_type: str, call: dict | None = None) -> tuple[dict, list[str]]:
    """The keyword arguments of one generation call, as this pipeline class spells them.

    Our ``guidance`` goes to the argument families.yaml names (``guidance_arg``; HunyuanImagePipeline.__call__
    has ``distilled_guidance_scale`` and no ``guidance_scale``), else ``guidance_scale``. A setting the
    pipeline's ``__call__`` does not accept is left out and returned (the caller records it); a card's
    ``call`` key it does not accept is an error (a typo would otherwise be passed on or lost).
    """

    names, var_kw = _call_parameters(pipeline_class)
    guidance_arg = (pipeline_family(pipeline_class.__name__) or {}).get("guidance_arg", "guidance_scale")
    ours = {"prompt": list(prompts), "generator": generators, "num_inference_steps": steps, guidance_arg: guidance,
            "height": size, "width": size, "output_type": output_type}
    kwargs = {k: v for k, v in ours.items() if var_kw or k in names}
    ignored = sorted(set(ours) - set(kwargs))
    unknown = [k for k in (call or {}) if not var_kw and k not in names]
    if unknown:
        raise AuditError(f"{pipeline_class.__name__}.__call__ has no argument {', '.join(map(repr, unknown))} "
                         f"(the model card's call settings); it takes: {', '.join(sorted(names - {'self'}))}")
    kwargs.update(call or {})
    return kwargs, ignored


def output_images(out):
    """The images of a pipeline output: ``.images``; ``.image`` (Kandinsky5T2IPipeline returns
    KandinskyImagePipelineOutput(image=...)); or the first frame of ``.frames`` (B, F, H, W, C) of a
    video pipeline asked for one frame."""
    for name in ("images", "image"):
        if getattr(out, name, None) is not None:
            return getattr(out, name)
    frames = getattr(out, "frames", None)
    if frames is not None:
        return [f[0] for f in frames]
    raise AuditError(f"{type(out).__name__}: no images, image or frames in the pipeline output")


def _write_batch(run: RunDir, card: ModelCard, batch, seeds, images, nsfw, seconds: float, rank: int,
                 size: int | None = None, batch_info: dict | None = None) -> None:
    """PNGs first (atomic), then one appended line per image: a record never outruns its file."""
    records = []
    for (p, k), seed, arr, unsafe in zip(batch, seeds, images, nsfw):
        png, flags, digest = _encode(arr)
        if unsafe:
            flags.append("nsfw")

        path = run.image_path(p["id"], k)
        atomic_write_bytes(path, png)
        records.append({"prompt_id": p["id"], "sample": k, "seed": seed, "path": run.rel(path),
                        "sha256": hashlib.sha256(png).hexdigest(), "width": int(arr.shape[1]),
                        "height": int(arr.shape[0]), "pixel_digest": digest, "seconds": round(seconds, 4),
                        "flags": flags,
                        "model": card.name, "rank": rank, **(batch_info or {}),
                        # the pipeline chose another size (HiDream, Kandinsky 5): recorded, not a defect flag
                        **({"requested_size": size} if size and tuple(arr.shape[:2]) != (size, size) else {})})
    append_jsonl(run.image_shard(rank), records)


def merge_shards(run: RunDir, prompts: list[dict], images_per_prompt: int, made_now: int) -> dict:
    """Write images.jsonl in prompt order from every shard; return counts for the manifest."""
    from .rundir import remove_write_leftovers

    remove_write_leftovers(run.root / "images")  # every process has finished its share: nothing is in flight
    done = _done_items(run)
    order = [(p["id"], k) for p in prompts for k in range(images_per_prompt)]
    records = [done[key] for key in order if key in done]
    atomic_write_jsonl(run.images, records)
    run.mark_finished(run.images)
    flags: dict[str, int] = {}
    for r in records:
        for f in r["flags"]:
            flags[f] = flags.get(f, 0) + 1
    missing = len(order) - len(records)
    timed = [r["seconds"] for r in records if r.get("seconds") is not None]  # none: images made elsewhere
    counts = {"status": "done" if not missing else "incomplete", "images": len(records),
              "generated_now": made_now, "missing": missing, "flags": flags,
              "seconds_per_image": round(sum(timed) / len(timed), 4) if timed else None}
    run.update_stage("generate", **counts)
    return counts
