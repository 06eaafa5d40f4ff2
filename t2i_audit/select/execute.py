"""Carrying out selection policies on real seeds — one path for ``select --of N --keep K --at F`` and
``select --budget B``: scan, rank, continue (or whole images).

``run_policies`` walks ``Work`` items (some prompts under one policy), ``CHUNK_PROMPTS`` prompts at a time in
prompt order:

* probe policy (one rung ``(s, K)`` of N): the chunk's **scan batches** (``generate.plan_batches`` over its
  prompts × the seeds the policy and its baselines need, cut every ``batch_size``) are replayed to loop index
  ``s`` with a ``continuation`` snapshot, and the fitted probe gives each seed's risk (``scan.batch_risks``);
  ``Roles`` marks the seeds to finish (``kept``: the K lowest risks; ``random``: a seeded draw; ``whole``: the
  first n seeds, the budget's whole-image baseline); every seed in any role is **continued** from its
  snapshot, in **finish batches** cut from that list (prompt order, sample order) every ``batch_size``.
* whole-image policy: each prompt's n seeds are generated in full, in batches cut the same way.

Snapshots are held for one chunk only (its scanned seeds' latents, scheduler state and generator states),
never for every prompt at once. A scan costs ``s + 1`` loop iterations a seed, a continuation ``T − s − 1``.

**Resume, and what a continued image's bytes depend on.** Every scan batch's risks go to a ``ScanJournal``
(``selection.jsonl``, stamped with the settings that made them, :mod:`t2i_audit.resume`) as it ends; a resumed
chunk reuses them, so its choice is the recorded one. A finish batch whose images are all on disk with their
recorded bytes is skipped; any other is continued again, after replaying its members' scan batches (the same
batches, hence the same latents). A continued image's bytes are a function of the model, the sampler settings,
its seed, the machine and thread count, its **scan batch** (iterations 0…s: the chunk's planned batch-mates)
and its **finish batch** (iterations s+1…T−1 and the VAE decode: the chunk's finished seeds, which follow from
the recorded risks). Both batches are functions of the settings alone (prompts, N, K, s, ``batch_size``,
``CHUNK_PROMPTS``), never of what is on disk, so a kill, a resume or a healed image ends with the bytes of an
uninterrupted run; each image record names both (``scan_batch_members``, ``batch_members``).

``Counter`` counts what was actually spent — denoiser calls and the image rows in them (CFG halves folded),
VAE decodes (finished images) — and the seconds of the scan, the finish and the whole images.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from ..rundir import RunDir, atomic_write_jsonl
from .policies import Staged

CHUNK_PROMPTS = 8  # prompts scanned before their kept seeds are finished: the snapshots held at once
SCAN_FIELDS = ("prompt_id", "sample", "seed", "risk", "category", "text", "made_with")


@dataclass
class Counter:
    denoiser_calls: int = 0
    image_iterations: float = 0.0  # denoiser rows / (2 with CFG): one loop iteration of one image
    decodes: int = 0
    seconds: dict = field(default_factory=lambda: {"scan": 0.0, "finish": 0.0, "whole": 0.0})

    def attach(self, pipe, cfg_doubles: bool = True):
        den = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)

        def pre(_m, args, kwargs):
            x = kwargs.get("sample", kwargs.get("hidden_states", args[0] if args else None))
            self.denoiser_calls += 1
            self.image_iterations += x.shape[0] / (2 if cfg_doubles else 1)
        return den.register_forward_pre_hook(pre, with_kwargs=True)

    def as_dict(self) -> dict:
        return {"denoiser_calls": self.denoiser_calls, "loop_iterations": self.image_iterations,
                "vae_decodes": self.decodes, "seconds": {k: round(v, 2) for k, v in self.seconds.items()}}


def _scan_key(rec: dict) -> tuple[str, int]:
    float(rec["risk"])  # a scan record has a risk (a whole-image row has none): KeyError / TypeError otherwise
    return rec["prompt_id"], int(rec["sample"])


class ScanJournal:
    """The scan risks of a run: those ``path`` holds that were made with ``made_with`` are reused; every record
    of this call (reused or new, in scan order) is written back, atomically, each time new ones arrive — a kill
    loses at most the scan batch in flight."""

    def __init__(self, path: Path, made_with: Mapping):
        from ..resume import reusable_records

        self.path, self.made_with = Path(path), dict(made_with)
        self.reusable = reusable_records(self.path, self.made_with, _scan_key, kind="selection")
        self.rows: list[dict] = []

    def recorded(self, keys: list[tuple[str, int]]) -> list[dict] | None:
        """The reusable records of ``keys`` (a whole scan batch), or None when any is missing."""
        got = [self.reusable.get(k) for k in keys]
        if any(g is None for g in got):
            return None
        self.rows += got
        return got

    def add(self, records: list[dict]) -> list[dict]:
        from ..resume import stamped

        made = stamped(records, self.made_with)
        self.rows += made
        atomic_write_jsonl(self.path, self.rows)
        return made


@dataclass
class Work:
    """Prompts run under one policy: a one-rung ``Staged`` with its ``Roles``, or whole images with
    ``roles(prompt id)`` → how many."""
    label: str
    prompts: list[dict]
    policy: object
    roles: Callable


def run_policies(rd: RunDir, pipe, card, work: list[Work], fitted: dict, s: dict, seed: int, counter: Counter,
                 journal: ScanJournal, progress: bool = False) -> list[dict]:
    """Every work item, chunk by chunk; images.jsonl rewritten in row order. Returns the rows (scan rows with
    their ``roles``; whole-image rows)."""
    from ..generate import _done_items

    done = _done_items(rd)
    rows: list[dict] = []
    for w in work:
        for i in range(0, len(w.prompts), CHUNK_PROMPTS):
            chunk = w.prompts[i:i + CHUNK_PROMPTS]
            if isinstance(w.policy, Staged):
                rows += run_chunk_probe(rd, pipe, card, chunk, w.policy, w.roles, fitted, s, seed, counter, done,
                                        journal)
            else:
                rows += run_chunk_whole(rd, pipe, card, chunk, {p["id"]: w.roles(p["id"]) for p in chunk}, s, seed,
                                        counter, done)
            if progress:
                print(f"[select] {w.label}: {min(i + CHUNK_PROMPTS, len(w.prompts))}/{len(w.prompts)} prompts",
                      file=sys.stderr)
    finished = _done_items(rd)
    atomic_write_jsonl(rd.images, [finished[(r["prompt_id"], r["sample"])] for r in rows
                                   if r["roles"] and (r["prompt_id"], r["sample"]) in finished])
    rd.mark_finished(rd.images)
    return rows


def _finish_batches(todo: list, batch_size: int) -> list[list]:
    return [todo[i:i + batch_size] for i in range(0, len(todo), batch_size)]


def run_chunk_probe(rd: RunDir, pipe, card, chunk: list[dict], policy, roles_of, fitted: dict, s: dict,
                    seed: int, counter: Counter, done: dict, journal: ScanJournal) -> list[dict]:
    """Scan, rank, continue one chunk under a one-rung probe policy. ``roles_of(pid, risks)`` → {sample: roles}.
    Returns the chunk's scan rows (the scan record, ``roles``, ``scan_step``)."""
    from ..generate import _write_batch, batch_member, image_seed, plan_batches
    from .scan import batch_risks, scan_record
    from .continuation import Snapshot, continue_batch, snapshot_maker

    step, n_scan = policy.rungs[0][0], roles_of.n_scan
    plan = plan_batches(chunk, n_scan, s["batch_size"])
    snaps: dict[int, Snapshot] = {}

    def replay(b: int) -> list[dict]:
        """Scan batch ``b`` to loop index ``step``: its snapshot kept, its scan records returned."""
        t0, holder = time.perf_counter(), {}
        seeds = [image_seed(p["id"], k, seed) for p, k in plan[b]]
        risks = batch_risks(pipe, plan[b], seeds, fitted, s, step, extra=[snapshot_maker(step, holder)])
        snaps[b] = holder["snap"].snapshot
        counter.seconds["scan"] += time.perf_counter() - t0
        return [scan_record(p, k, x, r) for (p, k), x, r in zip(plan[b], seeds, risks)]

    scanned, where = {}, {}
    for b, batch in enumerate(plan):
        recs = journal.recorded([(p["id"], k) for p, k in batch]) or journal.add(replay(b))
        for j, ((p, k), rec) in enumerate(zip(batch, recs)):
            scanned[(p["id"], k)], where[(p["id"], k)] = rec, (b, j)
    rows, todo = [], []
    for p in chunk:
        roles = roles_of(p["id"], [float(scanned[(p["id"], k)]["risk"]) for k in range(n_scan)])
        for k in range(n_scan):
            rec = scanned[(p["id"], k)]
            rows.append({**{f: rec[f] for f in SCAN_FIELDS if f in rec}, "roles": sorted(roles.get(k, ())),
                         "scan_step": step})
            if roles.get(k):
                todo.append((p, k))
    for fb in _finish_batches(todo, s["batch_size"]):
        missing = [j for j, (p, k) in enumerate(fb) if (p["id"], k) not in done]
        if not missing:
            continue
        for b in sorted({where[(p["id"], k)][0] for p, k in fb} - set(snaps)):
            replay(b)  # a resumed chunk: the scan batch again, for its latents (the recorded risks stand)
        t0 = time.perf_counter()
        snap = Snapshot.concat([snaps[where[(p["id"], k)][0]].rows([where[(p["id"], k)][1]]) for p, k in fb])
        images = continue_batch(pipe, [p["text"] for p, _ in fb], snap, steps=s["steps"], guidance=s["guidance"],
                                size=s["size"], call=s["call"])
        counter.decodes += len(fb)
        members = [batch_member(p["id"], k) for p, k in fb]
        for b in sorted({where[(fb[j][0]["id"], fb[j][1])][0] for j in missing}):  # each record names its scan batch
            js = [j for j in missing if where[(fb[j][0]["id"], fb[j][1])][0] == b]
            _write_batch(rd, card, [fb[j] for j in js], [scanned[(fb[j][0]["id"], fb[j][1])]["seed"] for j in js],
                         [images[j] for j in js], [False] * len(js), 0.0, 0, s["size"],
                         batch_info={"continued_from_step": step, "batch_members": members,
                                     "scan_batch_members": [batch_member(p["id"], k) for p, k in plan[b]]})
        counter.seconds["finish"] += time.perf_counter() - t0
    return rows


def run_chunk_whole(rd: RunDir, pipe, card, chunk: list[dict], n_of: dict, s: dict, seed: int, counter: Counter,
                    done: dict) -> list[dict]:
    """Each prompt's first ``n_of[pid]`` seeds generated in full (batches cut from that list)."""
    import torch

    from ..generate import _write_batch, batch_member, image_seed, output_images, pipeline_call_kwargs

    todo = [(p, k) for p in chunk for k in range(n_of[p["id"]])]
    t0 = time.perf_counter()
    for fb in _finish_batches(todo, s["batch_size"]):
        if all((p["id"], k) in done for p, k in fb):
            continue
        sd = [image_seed(p["id"], k, seed) for p, k in fb]
        gens = [torch.Generator("cpu").manual_seed(x) for x in sd]
        kwargs, _ = pipeline_call_kwargs(type(pipe), [p["text"] for p, _ in fb], gens, steps=s["steps"],
                                         guidance=s["guidance"], size=s["size"], output_type="np", call=s["call"])
        with torch.inference_mode():
            images = output_images(pipe(**kwargs))
        counter.decodes += len(fb)
        keep = [j for j, (p, k) in enumerate(fb) if (p["id"], k) not in done]
        _write_batch(rd, card, [fb[j] for j in keep], [sd[j] for j in keep], [images[j] for j in keep],
                     [False] * len(keep), 0.0, 0, s["size"],
                     batch_info={"batch_members": [batch_member(p["id"], k) for p, k in fb]})
    counter.seconds["whole"] += time.perf_counter() - t0
    # a whole-image policy: every image is kept (the final judge picks among them) and is its own baseline
    return [{"prompt_id": p["id"], "category": p.get("category"), "sample": k, "seed": image_seed(p["id"], k, seed),
             "roles": sorted({"kept", "whole"} | ({"random"} if k == 0 else set()))} for p, k in todo]
