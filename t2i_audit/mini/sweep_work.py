"""The sweep's models trained and evaluated, resumably, by one or more worker processes.

Each model is one job (train, then evaluate) in a folder that records its settings (card.json:
the generator config; sweep_eval.json: the evaluation settings). A worker takes the next job
whose lock (``.locks/<model>.lock``, an flock the OS releases when the process dies) is free,
so workers in one ``--workers N`` sweep, or sweeps started separately on the same folder (one
per core), share the list without training a model twice. A killed sweep resumes: finished
models are reused when their recorded settings match, a model whose folder holds other settings
is refused (never overwritten), a half-trained one (no final card) is trained again, and so is one
whose weights are gone (reports/sweep keeps cards and evaluations, not weights) when it is still to be
evaluated or when ``--train-only`` asks for the weights.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from ..errors import AuditError
from ..resume import differences
from ..rundir import atomic_write_text
from .sweep_design import SweepConfig, generator_config, model_jobs, model_name, seen_pairs

WEIGHT_FILES = ("unet/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors",
                "vae/diffusion_pytorch_model.safetensors")
EVAL_VERSION = 3  # 2: 16 px-aware grids, control decodability per composition, eval CPU seconds; 3: decodability
# from other seeds than the judged ones, text-encoder reference, judged seeds' headline decodability (issue 35)


def eval_key(cfg: SweepConfig) -> dict:
    return {"samples": cfg.samples, "decode_samples": cfg.decode_samples, "eval_steps": cfg.eval_steps,
            "guidance": cfg.guidance, "size": cfg.size, "n_splits": cfg.n_splits, "prompts": 24, "version": EVAL_VERSION,
            **({"device": cfg.device} if cfg.device != "cpu" else {})}  # GPU kernels give other images


def trained_card(folder: Path, expected) -> dict | None:
    """The final card of a model trained with exactly the `expected` GeneratorConfig; None when
    it is not (fully) trained yet; AuditError when it was trained with other settings."""
    path = folder / "card.json"
    if not path.is_file():
        return None
    try:
        card = json.loads(path.read_text())
    except ValueError:
        return None  # a write cut short (writes are atomic, so only a foreign file): retrain
    if not card.get("final"):
        return None
    # a setting added after the card was written is absent from it; its default reproduces the old behaviour
    recorded = {**_as_stored(type(expected)()), **(card.get("config") or {})}
    diff = differences(recorded, _as_stored(expected))
    if diff:
        raise AuditError(f"{folder}: trained with other settings ({'; '.join(diff)}); this sweep neither reuses nor "
                         "overwrites it — choose another --out, or rerun with the settings of that sweep")
    return card


def _as_stored(config) -> dict:
    """A config dataclass as the card's JSON holds it (tuples as lists)."""
    return json.loads(json.dumps(asdict(config), default=list))


def has_weights(folder: Path) -> bool:
    return all((folder / part).is_file() for part in WEIGHT_FILES)


def cached_eval(folder: Path, cfg: SweepConfig) -> dict | None:
    path = folder / "sweep_eval.json"
    if not path.is_file():
        return None
    try:
        cached = json.loads(path.read_text())
    except ValueError:
        return None
    return cached["eval"] if cached.get("key") == eval_key(cfg) else None


@contextlib.contextmanager
def model_lock(out: Path, name: str):
    """Yields True when this process holds the model's lock (else False: another worker has it)."""
    import fcntl

    locks = out / ".locks"
    locks.mkdir(exist_ok=True)
    fd = os.open(locks / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock; the file stays (unlinking it would let two workers race)


def work(out: Path, cfg: SweepConfig, *, train: bool = True, evaluate: bool = True, log: Callable = print) -> None:
    """Every job of the sweep not done and not held by another worker, in model_jobs order."""
    from ..quiet import library_logs
    from .sweep_eval import evaluate_model
    from .train_generator import train_generator

    for width, cov, seed in model_jobs(cfg):
        name = model_name(width, cov, seed)
        folder = out / "models" / name
        with model_lock(out, name) as mine:
            if not mine:
                log(f"{name}: held by another worker, skipped")
                continue
            gcfg = generator_config(cfg, width, cov, seed)
            card = trained_card(folder, gcfg)
            if card is not None and not has_weights(folder) and (not evaluate or cached_eval(folder, cfg) is None):
                # weights are not committed (> 2 MB): a model to evaluate, or one --train-only is asked to
                # make (its weights are what a later --eval-only reads), is trained again
                card = None
            if card is not None:
                log(f"{name}: done, skipped")
            elif train:
                log(f"{name}: training {cfg.steps} steps on {len(seen_pairs(cov, seed))} pairs, width {width}")

                def progress(msg: str) -> None:  # every 250th step only
                    if msg.startswith("step") and int(msg.split()[1]) % 250 == 0:
                        log(f"{name}: {msg}")

                with library_logs():  # as below: the 8-token mini model's truncation warnings are by design
                    card = train_generator(folder, gcfg, log=progress)
                log(f"{name}: {card['steps']} steps, {card['cpu_seconds']} CPU s")
            if card is None or not evaluate or cached_eval(folder, cfg) is not None:
                continue
            log(f"{name}: evaluating (24 prompts × {cfg.samples} samples)")
            with library_logs():  # the mini model reads 8 tokens by design: the libraries' truncation warnings
                ev = evaluate_model(folder, cfg, cov, seed)  # about its prompts are expected, not actionable
            atomic_write_text(folder / "sweep_eval.json", json.dumps({"key": eval_key(cfg), "eval": ev}))


def _worker_main(out: str, cfg: SweepConfig, train: bool, evaluate: bool, index: int) -> None:
    import torch

    torch.set_num_threads(1)
    work(Path(out), cfg, train=train, evaluate=evaluate, log=lambda m: print(f"[worker {index}] {m}", flush=True))


def run_workers(out: Path, cfg: SweepConfig, *, train: bool, evaluate: bool, log: Callable = print) -> None:
    """cfg.workers processes (one thread each) share the jobs; 1 works in this process."""
    for width, cov, seed in model_jobs(cfg):  # refuse folders of other settings here, before any work
        trained_card(out / "models" / model_name(width, cov, seed), generator_config(cfg, width, cov, seed))
    if cfg.workers <= 1:
        work(out, cfg, train=train, evaluate=evaluate, log=log)
        return
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # a fresh interpreter: no forked torch thread pools
    procs = [ctx.Process(target=_worker_main, args=(str(out), cfg, train, evaluate, i), daemon=False)
             for i in range(cfg.workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [i for i, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        raise AuditError(f"sweep worker(s) {failed} failed (exit codes {[procs[i].exitcode for i in failed]}); what "
                         f"finished is kept in {out / 'models'} — rerun the same command to resume")
