"""Selection, step 2 — **rank**: which scanned seeds each role finishes. ``kept``: the K lowest risks;
``random``: a seeded draw (``select --of``'s lift); ``whole``: with ``select --budget`` every scanned seed (at
least as many as whole images at the policy's cost need), so its baselines are expectations over subsets of
them, never one draw. ``n_whole``: how many images a whole-image policy generates (n or n + 1 by a seeded
coin between two counts)."""

from __future__ import annotations

import hashlib
import random

import numpy as np

from .policies import Whole


def random_picks(prompt_id: str, n_of: int, keep: int, seed: int) -> list[int]:
    """K of the N samples, drawn from a generator seeded by (prompt id, seed): the same everywhere."""
    digest = int(hashlib.sha256(f"{prompt_id}:random:{seed}".encode()).hexdigest()[:15], 16)
    return sorted(random.Random(digest).sample(range(n_of), keep))


def _coin(pid: str, seed: int, t: float) -> bool:
    return int(hashlib.sha256(f"{pid}:mix:{seed}".encode()).hexdigest()[:12], 16) / 16 ** 12 < t


def n_whole(policy, pid: str, seed: int, loop_steps: int) -> int:
    """Whole images this prompt gets under a whole-image policy (``WholeMix``: n or n + 1 by a seeded coin)."""
    if isinstance(policy, Whole):
        return policy.n
    return policy.n + int(_coin(pid, seed, policy.t))


class Roles:
    """Which scanned seeds each role finishes: ``kept`` (the K lowest risks of the first N; ties: the lower
    sample), ``random`` (``random_k`` of the N, a seeded draw: ``random_picks``), and with ``whole`` every
    scanned seed — max(N, whole images at the policy's cost) of them: ``select --budget``'s baselines are the
    expected best of n over their subsets."""

    def __init__(self, policy, seed: int, loop_steps: int, *, random_k: int = 1, whole: bool = True):
        self.policy, self.seed, self.T, self.random_k = policy, seed, loop_steps, random_k
        cost = policy.cost(loop_steps).iterations
        self.n_scan = max(policy.n_of, int(np.ceil(cost / loop_steps))) if whole else policy.n_of
        self.n_whole = (lambda pid: self.n_scan) if whole else (lambda pid: 0)  # noqa: E731

    def __call__(self, pid: str, risks: list[float]) -> dict[int, set]:
        N, K = self.policy.n_of, self.policy.keep
        out: dict[int, set] = {}
        for k in sorted(range(N), key=lambda k: (risks[k], k))[:K]:
            out.setdefault(k, set()).add("kept")
        for k in random_picks(pid, N, self.random_k, self.seed) if self.random_k else ():
            out.setdefault(k, set()).add("random")
        for k in range(self.n_whole(pid)):
            out.setdefault(k, set()).add("whole")
        return out
