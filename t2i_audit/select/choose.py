"""Which policy to run for a budget, chosen by nested cross-validation — never on the prompts it is scored on.

For a budget of B denoiser loop iterations per prompt the candidates are the policies ``select`` can
run: whole images judged by the final judge (best of n with n · T ≤ B, and the n / n + 1 mix that sits on
the whole-image curve at B) and probe scans / successive halving whose cost is ≤ B. Outer folds are the
risk folds (prompt groups: ``scenes.prompt_groups``). Inside each outer fold the choice is made on the *other* folds' prompts, with
risks from probes that saw neither the outer fold nor the prompt's own fold (``risks.Risks.inner_oof``):

1. the candidate with the highest mean success (ties: the cheaper);
2. if that is a probe policy, it must beat the best whole-image candidate on those prompts with the lower
   end of a one-sided 95 % group bootstrap interval above 0 — else the choice **falls back to whole
   images**. A probe that does not clearly help is not used, so the procedure sits on the whole-image curve
   rather than below it by the luck of a choice.

The chosen policy is then scored on the outer fold's prompts with their ordinary out-of-fold risks.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from ..clusters import GroupBootstrap
from .policies import Staged, simulate, whole_at

MARGIN_QUANTILE = 0.05  # one-sided 95 %: a probe policy is kept only when this quantile of its gain is > 0


def candidates(policies: Sequence, budget: float, loop_steps: int, seeds: int) -> list:
    probe = [p for p in policies if isinstance(p, Staged) and p.cost(loop_steps).iterations <= budget + 1e-9]
    return whole_at(budget, loop_steps, seeds) + probe


def _rows(risks: Mapping, rows: np.ndarray) -> dict:
    return {name: {step: r[rows] for step, r in by.items()} for name, by in risks.items()}


def choose(cands: Sequence, success: np.ndarray, risks: Mapping, rows: np.ndarray, groups: np.ndarray,
           loop_steps: int, *, n_boot: int = 1000, seed: int = 0):
    """(policy, whether a probe policy lost to the fall-back rule) over the prompts ``rows``."""
    per = {p: simulate(p, success[rows], _rows(risks, rows)) for p in cands}
    return decide(per, groups[rows], loop_steps, n_boot=n_boot, seed=seed)


def decide(per: Mapping, groups: np.ndarray, loop_steps: int, *, n_boot: int = 1000, seed: int = 0):
    """The rule on per-prompt outcomes ``{policy: (prompts,)}``: the best mean (ties: cheaper); a probe policy
    only when its gain over the best whole-image candidate clears the one-sided 95 % margin."""
    order = sorted(per, key=lambda p: (-float(np.mean(per[p])), p.cost(loop_steps).iterations))
    best = order[0]
    if not isinstance(best, Staged):
        return best, False
    whole = next(p for p in order if not isinstance(p, Staged))
    gain = GroupBootstrap(groups, n_boot, seed).means(per[best] - per[whole])
    if np.quantile(gain, MARGIN_QUANTILE) > 0:
        return best, False
    return whole, True


def nested(policies: Sequence, budget: float, success: np.ndarray, fold_of_prompt: np.ndarray, groups: np.ndarray,
           oof_risks: Mapping, inner_risks: Callable[[int], Mapping], loop_steps: int, *, seed: int = 0) -> dict:
    """Per-prompt outcome of "choose on the other folds, run on this one". ``inner_risks(o)``: the risks for
    choosing inside outer fold ``o`` (score → step → (prompts, S), NaN on fold ``o``)."""
    cands = candidates(policies, budget, loop_steps, success.shape[1])
    P = success.shape[0]
    got, cost, chosen = np.full(P, np.nan), np.full(P, np.nan), []
    for o in sorted(set(fold_of_prompt.tolist())):
        train, test = np.flatnonzero(fold_of_prompt != o), np.flatnonzero(fold_of_prompt == o)
        inner = inner_risks(o) if any(isinstance(p, Staged) for p in cands) else {}
        pick, fell_back = choose(cands, success, inner, train, groups, loop_steps, seed=seed)
        got[test] = simulate(pick, success[test], _rows(oof_risks, test))
        cost[test] = pick.cost(loop_steps).iterations
        chosen.append({"fold": int(o), "policy": pick.name, "spec": pick.as_dict(), "fell_back": fell_back,
                       "iterations": pick.cost(loop_steps).iterations, "whole_images": not isinstance(pick, Staged)})
    return {"success": got, "iterations": cost, "chosen": chosen}
