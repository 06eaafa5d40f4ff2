"""Carrying out one category's budget policy on real seeds: scan, rank, continue, or whole images.

Per chunk of prompts (``budget_run.CHUNK_PROMPTS``, in prompt order):

* probe policy (one rung ``(s, K)`` of N): the planned scan batches (``generate.plan_batches`` over the
  prompts × the seeds the policy and its baselines need) are replayed to loop index ``s`` with a
  ``continuation`` snapshot; the fitted probe gives each seed's risk; the K lowest are kept, one seed is
  drawn at random (``select.random_picks``), and the first n seeds form the whole-image baseline at the
  policy's cost. Every seed in any role is continued from its snapshot, in finish batches cut from that
  list (prompt order, sample order) every ``batch_size``.
* whole-image policy: each prompt's n seeds are generated in full in batches cut the same way.

Every finished image is written like ``generate`` writes it (PNG, images.jsonl record with its batch).
``Counter`` counts what was actually spent — denoiser calls and the image rows in them (CFG halves
folded), VAE decodes (finished images) — and the seconds of the scan, the finish and the whole images.
A chunk whose images are all on disk is skipped on resume (its scan rows are read back).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ...rundir import RunDir


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


def _finish_batches(todo: list, batch_size: int) -> list[list]:
    return [todo[i:i + batch_size] for i in range(0, len(todo), batch_size)]


def run_chunk_probe(rd: RunDir, pipe, card, chunk: list[dict], policy, roles_of, fitted: dict, s: dict,
                    seed: int, counter: Counter, done: dict) -> list[dict]:
    """Scan, rank, continue one chunk under a one-rung probe policy. ``roles_of(pid, risks)`` → {sample: roles}.
    Returns the chunk's scan rows (prompt, sample, seed, risk, roles)."""
    from ...generate import _write_batch, image_seed, plan_batches
    from ..early import replay_batch
    from ..linear import onehot_constituents
    from ..per_image import apply_probe, design
    from .continuation import Snapshot, continue_batch, snapshot_maker

    step, n_scan = policy.rungs[0][0], roles_of.n_scan
    plan = plan_batches(chunk, n_scan, s["batch_size"])
    snaps, where, risk, seeds = [], {}, {}, {}
    t0 = time.perf_counter()
    for b, batch in enumerate(plan):
        holder: dict = {}
        sd = [image_seed(p["id"], k, seed) for p, k in batch]
        arrays = replay_batch(pipe, batch, sd, s, [step], previews=False, extra=[snapshot_maker(step, holder)])
        X = design(arrays, step, "probe", slice(None), onehot_constituents([p for p, _ in batch], fitted["onehot"])[0])
        for j, (p, k) in enumerate(batch):
            probe = fitted["categories"][str(p.get("category"))][f"t{step:03d}"]
            risk[(p["id"], k)] = float(apply_probe(probe, X[j:j + 1])[0])
            where[(p["id"], k)], seeds[(p["id"], k)] = (b, j), sd[j]
        snaps.append(holder["snap"].snapshot)
    counter.seconds["scan"] += time.perf_counter() - t0
    rows, todo = [], []
    for p in chunk:
        roles = roles_of(p["id"], [risk[(p["id"], k)] for k in range(n_scan)])
        for k in range(n_scan):
            rows.append({"prompt_id": p["id"], "category": p.get("category"), "sample": k, "seed": seeds[(p["id"], k)],
                         "risk": risk[(p["id"], k)], "roles": sorted(roles.get(k, ())), "scan_step": step})
            if roles.get(k):
                todo.append((p, k))
    t0 = time.perf_counter()
    for i, fb in enumerate(_finish_batches(todo, s["batch_size"])):
        if all((p["id"], k) in done for p, k in fb):
            continue
        snap = Snapshot.concat([snaps[where[(p["id"], k)][0]].rows([where[(p["id"], k)][1]]) for p, k in fb])
        images = continue_batch(pipe, [p["text"] for p, _ in fb], snap, steps=s["steps"], guidance=s["guidance"],
                                size=s["size"], call=s["call"])
        counter.decodes += len(fb)
        keep = [j for j, (p, k) in enumerate(fb) if (p["id"], k) not in done]
        _write_batch(rd, card, [fb[j] for j in keep], [seeds[(fb[j][0]["id"], fb[j][1])] for j in keep],
                     [images[j] for j in keep], [False] * len(keep), 0.0, 0, s["size"],
                     batch_info={"finish_batch": i, "continued_from_step": step})
    counter.seconds["finish"] += time.perf_counter() - t0
    return rows


def run_chunk_whole(rd: RunDir, pipe, card, chunk: list[dict], n_of: dict, s: dict, seed: int, counter: Counter,
                    done: dict) -> list[dict]:
    """Each prompt's first ``n_of[pid]`` seeds generated in full (batches cut from that list)."""
    import torch

    from ...generate import _write_batch, image_seed, output_images, pipeline_call_kwargs

    todo = [(p, k) for p in chunk for k in range(n_of[p["id"]])]
    t0 = time.perf_counter()
    for i, fb in enumerate(_finish_batches(todo, s["batch_size"])):
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
                     [False] * len(keep), 0.0, 0, s["size"], batch_info={"whole_batch": i})
    counter.seconds["whole"] += time.perf_counter() - t0
    # a whole-image policy: every image is kept (the final judge picks among them) and is its own baseline
    return [{"prompt_id": p["id"], "category": p.get("category"), "sample": k, "seed": image_seed(p["id"], k, seed),
             "roles": sorted({"kept", "whole"} | ({"random"} if k == 0 else set()))} for p, k in todo]


class Roles:
    """Which scanned seeds each role finishes: ``kept`` (the K lowest risks of the first N), ``random`` (one of
    the N, a seeded draw), ``whole`` (the first n seeds, n at the policy's cost)."""

    def __init__(self, policy, seed: int, loop_steps: int):
        from .budget_run import n_whole

        self.policy, self.seed, self.T = policy, seed, loop_steps
        cost = policy.cost(loop_steps).iterations
        self.n_whole = lambda pid: n_whole(None, pid, seed, loop_steps, cost=cost)  # noqa: E731
        self.n_scan = max(policy.n_of, int(np.ceil(cost / loop_steps)))

    def __call__(self, pid: str, risks: list[float]) -> dict[int, set]:
        from ..select import random_picks

        N, K = self.policy.n_of, self.policy.keep
        out: dict[int, set] = {}
        for k in sorted(range(N), key=lambda k: (risks[k], k))[:K]:
            out.setdefault(k, set()).add("kept")
        for k in random_picks(pid, N, 1, self.seed):
            out.setdefault(k, set()).add("random")
        for k in range(self.n_whole(pid)):
            out.setdefault(k, set()).add("whole")
        return out
