"""Fresh seeds by construction: a selection is never scored on an image the probe was fitted on.

``select`` derives each scanned seed from (prompt id, sample, base seed) like ``generate`` does
(``generate.image_seed``). If the base seed equals the fitted run's, every scanned seed of a prompt that
run also made *is* one of its images — the probe was trained on it and the selection would re-score its
own training data. ``used_seeds`` reads which (prompt, seed) pairs the ``--from`` run generated
(images.jsonl), ``check`` refuses any overlap (unless ``--allow-seen``) and ``fresh_base_seed`` picks the
first base seed, counting up from the --from run's own + 1, whose scanned seeds it never used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import AuditError
from ..rundir import RunDir


def used_seeds(from_run: Path) -> tuple[set[tuple[str, int]], int]:
    """The (prompt id, seed) pairs of every image of the run, and its base seed (manifest / run.yaml; 0)."""
    rd = RunDir(from_run)
    pairs = {(r["prompt_id"], int(r["seed"])) for r in rd.read_images() if r.get("seed") is not None} \
        if rd.images.exists() else set()
    return pairs, _base_seed(rd)


def _base_seed(rd: RunDir) -> int:
    from ..safeload import load_yaml

    gen = (rd.read_manifest().get("stages") or {}).get("generate") or {}
    seed = (gen.get("settings") or {}).get("seed")
    if seed is None and rd.config.exists():
        cfg = load_yaml(rd.config) or {}
        seed = cfg.get("seed") if isinstance(cfg, dict) else None
    return int(seed or 0)


def scanned(prompts: Sequence[dict], n_of: int, base_seed: int) -> list[tuple[str, int, int]]:
    from ..generate import image_seed

    return [(p["id"], k, image_seed(p["id"], k, base_seed)) for p in prompts for k in range(n_of)]


def check(from_run: Path, prompts: Sequence[dict], n_of: int, base_seed: int, *, allow_seen: bool = False) -> int:
    """Refuse (AuditError) when a scanned seed is one the --from run generated for the same prompt; returns the
    number of such seeds (0, or the count allowed by ``allow_seen``)."""
    used, _ = used_seeds(from_run)
    seen = [(pid, k) for pid, k, s in scanned(prompts, n_of, base_seed) if (pid, s) in used]
    if seen and not allow_seen:
        n_prompts = len({pid for pid, _ in seen})
        raise AuditError(
            f"--seed {base_seed}: {len(seen)} scanned seeds of {n_prompts} prompts are images of the --from run "
            f"{from_run} (same prompt, same derived seed; e.g. prompt {seen[0][0]} sample {seen[0][1]}): its probe "
            "was fitted on them. Leave --seed out (a fresh base seed is picked) or pass --allow-seen")
    return len(seen)


def fresh_base_seed(from_run: Path, prompts: Sequence[dict], n_of: int) -> int:
    """The first base seed after the --from run's whose scanned seeds that run never generated."""
    used, base = used_seeds(from_run)
    b = base + 1
    while any((pid, s) in used for pid, _, s in scanned(prompts, n_of, b)):
        b += 1
    return b
