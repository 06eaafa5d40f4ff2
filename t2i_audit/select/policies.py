"""Seed-selection policies, simulated per prompt on a run that generated S seeds of every prompt.

A policy decides, per prompt, which of its seeds to spend compute on and which image to hand over;
success is whether that image passes the final judge. Simulated on a run with S seeds per prompt,
a policy that uses ``n ≤ S`` seeds is averaged over **every** n-subset of them (the seeds it would
have drawn), so a number carries no luck of which seeds came first.

* ``Whole(n)`` — n images in full; the final judge keeps a passing one if any (n = 1: one random seed,
  no judge). Expected success ``1 − C(F, n) / C(S, n)`` for F failing seeds of S. ``WholeMix`` — between
  n and n + 1 images, a seeded coin per prompt: the whole-image curve at any budget. Where the final judge
  is the one that defines success (the mini world's pixel judge) this is an **oracle** verifier: it never
  hands over a failing image when a passing one exists.
* ``WholeJudged(n, judge)`` — n images in full, the one another judge (``mini-judge``, the mini world's
  open_clip scorer, not the ground truth) rates highest is handed over: what a user without the oracle does.
* ``Staged(score, n_of, rungs)`` — scan n_of seeds; at each rung ``(loop index, survivors)`` keep the
  survivors with the lowest risk by ``score`` read at that step (ties: the lower sample index, as
  ``rank.Roles``); the last survivors are finished; more than one, and the final judge keeps a passing
  one. One rung is "best K of N at step s"; several are successive halving.

Costs come from ``costs.staged`` / ``costs.whole_images``. Scores are arrays ``(prompts, S)`` of risk
(lower = better), one per (score name, loop step): the study decides where they come from (out-of-fold
probe risks, the x0 preview, the CFG gap).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from math import comb
from typing import Mapping

import numpy as np

from .cost import Cost, staged, whole_images

PREVIEW_SCORES = ("x0", "x0-fitted")  # scores that need an x0 preview decoded and judged per scanned seed


@dataclass(frozen=True)
class Whole:
    n: int

    @property
    def name(self) -> str:
        return "random seed" if self.n == 1 else f"best of {self.n} whole images (final judge: oracle)"

    @property
    def family(self) -> str:
        return "random" if self.n == 1 else "whole images"

    def cost(self, steps: int) -> Cost:
        return whole_images(self.n, steps)

    def seconds(self, unit, steps: int) -> float:
        return self.cost(steps).seconds(unit)

    def as_dict(self) -> dict:
        return {"kind": "whole", "n": self.n}


@dataclass(frozen=True)
class WholeMix:
    """Whole images at a budget between n and n + 1 images: per prompt, n + 1 with probability t (a seeded
    coin), else n — the whole-image curve's value at that budget, achieved on average."""
    iterations: float
    steps: int

    @property
    def n(self) -> int:
        return int(self.iterations // self.steps)

    @property
    def t(self) -> float:
        return self.iterations / self.steps - self.n

    @property
    def name(self) -> str:
        return f"whole images mixed: {self.n} or {self.n + 1} ({self.t:.0%}), final judge"

    @property
    def family(self) -> str:
        return "whole images"

    def cost(self, steps: int) -> Cost:
        return whole_images(self.n, steps).scaled(1 - self.t) + whole_images(self.n + 1, steps).scaled(self.t)

    def seconds(self, unit, steps: int) -> float:
        return self.cost(steps).seconds(unit)

    def as_dict(self) -> dict:
        return {"kind": "whole-mix", "iterations": self.iterations, "steps": self.steps}


@dataclass(frozen=True)
class WholeJudged:
    """Best of ``n`` whole images picked by ``judge``'s score (not the judge that defines success): the non-oracle
    whole-image baseline. Simulated as a one-rung ranking at the last loop step by the judge's score."""
    n: int
    judge: str = "mini-judge"

    @property
    def name(self) -> str:
        return f"best of {self.n} whole images picked by {self.judge} (not the ground truth)"

    @property
    def family(self) -> str:
        return f"whole images, {self.judge} picks"

    def cost(self, steps: int) -> Cost:
        return Cost(iterations=self.n * steps, decodes=self.n, judge_calls=self.n)

    def seconds(self, unit, steps: int) -> float:
        return self.cost(steps).seconds(unit, judge=self.judge)

    def as_dict(self) -> dict:
        return {"kind": "whole-judged", "n": self.n, "judge": self.judge}


def whole_at(budget: float, steps: int, S: int) -> list:
    """The whole-image candidates within ``budget``: best of n (n·T ≤ budget) and, between two counts, the mix."""
    out = [Whole(n) for n in range(1, S + 1) if n * steps <= budget + 1e-9]
    if steps <= budget < S * steps and abs(budget / steps - round(budget / steps)) > 1e-9:
        out.append(WholeMix(float(budget), steps))
    return out


@dataclass(frozen=True)
class Staged:
    score: str
    n_of: int
    rungs: tuple[tuple[int, int], ...]  # ((loop index, survivors), …)
    continued: bool = True
    label: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        cut = " → ".join(f"{k} at step {s + 1}" for s, k in self.rungs)
        how = "" if self.continued else ", regenerated"
        return f"{self.score}: {self.n_of} scanned, {cut}{how}"

    @property
    def family(self) -> str:
        return self.score if len(self.rungs) == 1 else f"{self.score} (halving)"

    @property
    def keep(self) -> int:
        return self.rungs[-1][1]

    def cost(self, steps: int) -> Cost:
        return staged(self.n_of, list(self.rungs), steps, continued=self.continued,
                      previews=self.score in PREVIEW_SCORES)

    def seconds(self, unit, steps: int) -> float:
        return self.cost(steps).seconds(unit, score=self.score)

    def as_dict(self) -> dict:
        return {"kind": "staged", "score": self.score, "n_of": self.n_of, "rungs": [list(r) for r in self.rungs],
                "continued": self.continued}


def policy_from_dict(d: Mapping) -> Whole | WholeMix | WholeJudged | Staged:
    if d.get("kind") == "whole":
        return Whole(int(d["n"]))
    if d.get("kind") == "whole-judged":
        return WholeJudged(int(d["n"]), str(d["judge"]))
    if d.get("kind") == "whole-mix":
        return WholeMix(float(d["iterations"]), int(d["steps"]))
    return Staged(str(d["score"]), int(d["n_of"]), tuple((int(s), int(k)) for s, k in d["rungs"]),
                  bool(d.get("continued", True)))


def whole_success(success: np.ndarray, n: int) -> np.ndarray:
    """Per prompt, the expected success of n random seeds of S judged in full (hypergeometric)."""
    S = success.shape[1]
    fails = (success < 0.5).sum(1)
    return 1.0 - np.array([comb(int(f), n) for f in fails], float) / comb(S, n)


def subsets(S: int, n: int) -> np.ndarray:
    """Every n-subset of range(S), ascending within each: ``(C(S, n), n)``."""
    return np.array(list(itertools.combinations(range(S), n)), dtype=int)


def staged_success(success: np.ndarray, risks: Mapping[int, np.ndarray], policy: Staged) -> np.ndarray:
    """Per prompt, the policy's success averaged over every ``n_of``-subset of the S seeds. ``risks``: loop
    step → ``(prompts, S)`` risk of ``policy.score`` at that step."""
    P, S = success.shape
    sub = subsets(S, policy.n_of)  # (m, n): sample indices ascending → a stable sort breaks ties low
    alive = np.broadcast_to(sub, (P,) + sub.shape)  # (P, m, n) sample indices still in play
    rows = np.arange(P)[:, None, None]
    for step, keep in policy.rungs:
        r = risks[step][rows, alive]
        order = np.argsort(r, axis=-1, kind="stable")[..., :keep]
        alive = np.take_along_axis(alive, order, axis=-1)
    passed = success[rows, alive] > 0.5  # (P, m, keep)
    return passed.any(-1).mean(-1)


def simulate(policy, success: np.ndarray, risks: Mapping[str, Mapping[int, np.ndarray]]) -> np.ndarray:
    """Per-prompt expected success of ``policy`` (``risks``: score name → loop step → (prompts, S); a
    ``WholeJudged`` reads ``risks["judge:<name>"]["final"]``, minus the judge's score of each finished image)."""
    if isinstance(policy, Whole):
        return whole_success(success, policy.n)
    if isinstance(policy, WholeJudged):
        return staged_success(success, {0: risks[f"judge:{policy.judge}"]["final"]}, Staged("judge", policy.n, ((0, 1),)))
    if isinstance(policy, WholeMix):
        return (1 - policy.t) * whole_success(success, policy.n) + policy.t * whole_success(success, policy.n + 1)
    return staged_success(success, risks[policy.score], policy)


def grid(score: str, steps: list[int], loop_steps: int, S: int, *, halving: bool = True) -> list[Staged]:
    """The policies the study tries for one score: best K of N at each step (N = 2…S, K = 1…3, K < N),
    and, with ``halving``, successive halving over two steps (N → N/2 → 1, N = 4, 6, 8 where N ≤ S)."""
    out = [Staged(score, n, ((s, k),)) for s in steps for n in range(2, S + 1) for k in (1, 2, 3) if k < n]
    if halving:
        for a, b in itertools.combinations(sorted(steps), 2):
            for n in (4, 6, 8):
                if n <= S:
                    out.append(Staged(score, n, ((a, n // 2), (b, 1))))
    return [p for p in out if p.cost(loop_steps).iterations < loop_steps * p.n_of]


def whole_curve(success: np.ndarray, loop_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The whole-image curve: costs ``n·T`` (n = 1…S) and per-prompt expected success ``(prompts, S)``."""
    S = success.shape[1]
    return (np.arange(1, S + 1) * loop_steps).astype(float), np.stack(
        [whole_success(success, n) for n in range(1, S + 1)], axis=1)


def on_curve(curve: tuple[np.ndarray, np.ndarray], cost: float) -> np.ndarray:
    """Per-prompt whole-image success at ``cost`` loop iterations, linear between n and n + 1 images (what
    a user who mixes the two achieves on average); NaN outside [T, S·T]."""
    xs, ys = curve
    if cost < xs[0] - 1e-9 or cost > xs[-1] + 1e-9:
        return np.full(ys.shape[0], np.nan)
    i = int(np.clip(np.searchsorted(xs, cost) - 1, 0, len(xs) - 2))
    t = (cost - xs[i]) / (xs[i + 1] - xs[i])
    return ys[:, i] * (1 - t) + ys[:, i + 1] * t
