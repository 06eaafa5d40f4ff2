"""Which policy to run for a budget, chosen by nested cross-validation — never on the prompts it is scored on.

For a budget of B denoiser loop iterations per prompt the candidates are the policies ``select`` can
run: whole images judged by the final judge (n · T ≤ B) and probe scans / successive halving whose
cost is ≤ B. Outer folds are the risk folds (twin groups). Inside each outer fold the choice is the
candidate with the highest mean success on the *other* folds' prompts, using risks from probes that saw
neither the outer fold nor the prompt's own fold (``risks.Risks.inner_oof``); ties go to the cheaper.
The chosen policy is then scored on the outer fold's prompts with their ordinary out-of-fold risks.
Whole images are always among the candidates, so a probe that does not help loses the choice and the
procedure falls back to them.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from .selection import Staged, Whole, simulate


def candidates(policies: Sequence, budget: float, loop_steps: int) -> list:
    return [p for p in policies if p.cost(loop_steps).iterations <= budget + 1e-9]


def choose(cands: Sequence, success: np.ndarray, risks: Mapping, rows: np.ndarray, loop_steps: int):
    """The candidate with the highest mean success over ``rows`` (prompts); ties to the cheaper."""
    best, key = None, None
    for p in cands:
        s = float(np.mean(simulate(p, success[rows], _rows(risks, rows))))
        k = (s, -p.cost(loop_steps).iterations)
        if key is None or k > key:
            best, key = p, k
    return best


def _rows(risks: Mapping, rows: np.ndarray) -> dict:
    return {name: {step: r[rows] for step, r in by.items()} for name, by in risks.items()}


def nested(policies: Sequence, budget: float, success: np.ndarray, fold_of_prompt: np.ndarray,
           oof_risks: Mapping, inner_risks: Callable[[int], Mapping], loop_steps: int) -> dict:
    """Per-prompt outcome of "choose by inner CV, run on the outer fold". ``inner_risks(o)``: the risks for
    choosing inside outer fold ``o`` (score → step → (prompts, S), NaN on fold ``o``)."""
    cands = candidates(policies, budget, loop_steps)
    P = success.shape[0]
    got, cost, chosen = np.full(P, np.nan), np.full(P, np.nan), []
    for o in sorted(set(fold_of_prompt.tolist())):
        train, test = np.flatnonzero(fold_of_prompt != o), np.flatnonzero(fold_of_prompt == o)
        needs_risk = [p for p in cands if isinstance(p, Staged)]
        inner = inner_risks(o) if needs_risk else {}
        pick = choose(cands, success, inner, train, loop_steps)
        got[test] = simulate(pick, success[test], _rows(oof_risks, test))
        cost[test] = pick.cost(loop_steps).iterations
        chosen.append({"fold": int(o), "policy": pick.name, "spec": pick.as_dict(),
                       "iterations": pick.cost(loop_steps).iterations, "whole_images": isinstance(pick, Whole)})
    return {"success": got, "iterations": cost, "chosen": chosen}
