"""The denoiser's states for decodability over training, read on seeds no judged image used.

A checkpoint's judged images and the states a probe reads should not share trajectories: a half-drawn image
partly predicts itself (issue 35). So each prompt is replayed ``samples`` times with the run's seed rule at
sample indices ``offset``, ``offset + 1`` … (never an image of a run with fewer than ``offset`` images per
prompt), with the run's settings, through ``probes.capture.denoiser.run_hooked`` — the probe stage's own hooks:
every block's image stream averaged over space or tokens, at the first, middle and last loop iteration, both
halves of a CFG batch — and stored per checkpoint as ``activations/<label>/denoiser.npz`` (float16, one row per
prompt × sample) with ``meta.json`` (the key of everything that made it; a changed key is captured again).
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from ..rundir import atomic_write_bytes, atomic_write_json
from ..safeload import read_cache_json

SAMPLE_OFFSET = 1000  # replays use samples 1000, 1001 … of the seed rule: no judged image has these
AT_STEPS = (0, "mid", -1)


def capture_key(settings: dict, records: Sequence[dict], variant_key: str, samples: int, offset: int) -> str:
    ids = [r["id"] for r in records]
    return hashlib.sha1(json.dumps([settings, ids, variant_key, samples, offset, list(map(str, AT_STEPS)), 1],
                                   sort_keys=True, default=str).encode()).hexdigest()[:16]


def captured(folder: Path, key: str) -> bool:
    meta = read_cache_json(Path(folder) / "meta.json")
    return bool(meta and meta.get("key") == key and (Path(folder) / "denoiser.npz").is_file())


def capture_denoiser(pipe, records: Sequence[dict], folder: Path, *, key: str, steps: int, guidance: float,
                     size: int, seed: int, samples: int, batch_size: int, call: dict | None = None,
                     offset: int = SAMPLE_OFFSET) -> dict:
    """Replay every prompt × ``samples`` on fresh seeds with hooks; write ``folder/denoiser.npz`` + ``meta.json``."""
    from ..generate import image_seed
    from ..probes.capture.denoiser import run_hooked

    items = [(r, offset + k) for r in records for k in range(samples)]
    rows: dict[str, list] = {}
    info: dict = {}
    for i in range(0, len(items), batch_size):
        batch = items[i:i + batch_size]
        seeds = [image_seed(r["id"], k, seed) for r, k in batch]
        out, info = run_hooked(pipe, [r["text"] for r, _ in batch], seeds, steps=steps, guidance=guidance, size=size,
                               at_steps=None, call_kwargs=call)
        want = {range(info["n_steps"])[info["n_steps"] // 2 if t == "mid" else int(t)] for t in AT_STEPS}
        for name, arr in out.items():
            if int(name.split("__t")[1][:3]) in want:
                rows.setdefault(name, []).append(arr)
    arrays = {name: np.concatenate(v).astype(np.float16) for name, v in rows.items()}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    folder = Path(folder)
    atomic_write_bytes(folder / "denoiser.npz", buf.getvalue())
    n_steps = info.get("n_steps", steps)
    meta = {"key": key, "prompt_ids": [r["id"] for r, _ in items], "samples": [k for _, k in items],
            "arrays": sorted(arrays), "n_steps": n_steps, "middle_step": n_steps // 2,
            "timesteps": info.get("timesteps"), "settings": {"steps": steps, "guidance": guidance, "size": size,
                                                              "seed": seed, "samples": samples, "offset": offset},
            "sha256": hashlib.sha256((folder / "denoiser.npz").read_bytes()).hexdigest()}
    atomic_write_json(folder / "meta.json", meta)
    return meta


def load_capture(folder: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, arrays) of a capture, or ({}, {}) where there is none."""
    from ..safeload import read_json

    folder = Path(folder)
    if not (folder / "meta.json").is_file() or not (folder / "denoiser.npz").is_file():
        return {}, {}
    meta = read_json(folder / "meta.json", finite=False)
    with np.load(folder / "denoiser.npz") as f:
        arrays = {k: f[k] for k in f.files}
    return meta, arrays
