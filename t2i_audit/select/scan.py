"""Selection, step 1 — **scan**: N seeds of each prompt replayed to an early loop step, each read by the
per-image probe fitted on an earlier run (``--from RUN``: ``probes/early_probes.json``, written by
``t2i-audit probe RUN --early``), giving every (prompt, seed) a risk. ``predict --early`` stops here;
``select`` goes on to rank (``rank.py``), continue and finish (``execute.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import AuditError
from ..rundir import atomic_write_jsonl


def load_fitted(from_run: Path) -> dict:
    """The --from run's per-image probes, validated (:mod:`.probe_files`)."""
    from ..probes.probe_files import load_early_probes

    return load_early_probes(from_run)


def probe_for(fitted: dict, category: str, step: int) -> dict:
    cat = (fitted.get("categories") or {}).get(category)
    if not cat:
        have = ", ".join(sorted(fitted.get("categories") or {})) or "none"
        raise AuditError(f"no per-image probe for category {category!r} in the --from run (have: {have})")
    tag = f"t{step:03d}"
    if tag not in cat:
        raise AuditError(f"--at: the --from run's probes are at loop steps {sorted(cat)}, not {tag}")
    return cat[tag]


def scan_settings(fitted_settings: dict, card, seed: int, batch_size: int) -> dict:
    """The sampler settings the probes were fitted under (steps, guidance, size, dtype), with this run's seed
    and batch size: a probe read at step k of 20 means nothing at step k of 30."""
    return {**{k: fitted_settings[k] for k in ("steps", "guidance", "size", "dtype")},
            "seed": seed, "batch_size": batch_size, "call": dict(card.call)}


def scan_record(p: dict, sample: int, seed: int, risk: float) -> dict:
    """One scanned candidate as ``selection.jsonl`` and ``predict --early`` write it."""
    return {"prompt_id": p["id"], "sample": sample, "seed": seed, "risk": risk, "category": p.get("category"),
            "text": p["text"]}


def batch_risks(pipe, batch: list[tuple[dict, int]], seeds: list[int], fitted: dict, s: dict, step: int,
                extra=()) -> list[float]:
    """The fitted probe's risk of each member of one planned batch, replayed to loop index ``step`` (``extra``:
    more recorders for the replay, e.g. the continuation snapshot)."""
    from ..probes.capture.early import replay_batch
    from ..probes.fit.linear import onehot_constituents
    from ..probes.fit.per_image import apply_probe, design

    arrays = replay_batch(pipe, batch, seeds, s, [step], previews=False, extra=extra)
    X = design(arrays, step, "probe", slice(None), onehot_constituents([p for p, _ in batch], fitted["onehot"])[0])
    return [float(apply_probe(probe_for(fitted, str(p.get("category")), step), X[j:j + 1])[0])
            for j, (p, _) in enumerate(batch)]


def scan(path: Path, pipe, prompts: list[dict], fitted: dict, s: dict, *, n_of: int, step: int,
         progress: bool) -> list[dict]:
    """``predict --early``: the risk of every (prompt, sample < n_of) at ``step``, nothing finished; ``path``
    (JSONL) replaced batch by batch."""
    from ..generate import image_seed, plan_batches

    plan = plan_batches(prompts, n_of, s["batch_size"])
    out = []
    for b, batch in enumerate(plan):
        seeds = [image_seed(p["id"], k, s["seed"]) for p, k in batch]
        risks = batch_risks(pipe, batch, seeds, fitted, s, step)
        out += [scan_record(p, k, x, r) for (p, k), x, r in zip(batch, seeds, risks)]
        atomic_write_jsonl(path, out)  # whole batches only: a kill loses at most this batch
        if progress:
            print(f"[select] scanned batch {b + 1}/{len(plan)}", file=sys.stderr)
    return out


def scan_only(model: str, prompts: list[dict], from_run: Path, out: Path, *, n_of: int, at: float, seed: int = 0,
              batch_size: int = 4, device: str = "cpu", progress: bool = True, variant=None) -> list[dict]:
    """``predict --early``: the risk of each of N seeds of each prompt after the early steps, nothing finished
    (``variant``: the --from run's LoRAs / components, t2i_audit.variants)."""
    from ..generate import load_pipeline, resolve_device
    from ..models import resolve_model
    from ..probes.capture.early import step_at

    fitted = load_fitted(from_run)
    src = fitted["settings"]
    step = step_at(at, src["steps"])
    for cat in sorted({str(p.get("category")) for p in prompts}):
        probe_for(fitted, cat, step)
    card = resolve_model(model).with_variant(variant)
    s = scan_settings(src, card, seed, batch_size)
    pipe = load_pipeline(card, resolve_device(device), s["dtype"])
    # no resume: `out` is a file the user named (claimed with --force if it existed), replaced, never read back
    return scan(out, pipe, prompts, fitted, s, n_of=n_of, step=step, progress=progress)


