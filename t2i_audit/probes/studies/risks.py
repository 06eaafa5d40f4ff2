"""Per-image risks for the selection and binding studies: out-of-fold, on one fold plan, cached.

Rows are a category's images laid out as ``(prompts, seeds)``: only prompts whose every seed has a
verdict enter, so each policy sees the same seeds. Folds are grouped by ``scenes.prompt_groups`` (prompts that
show one scene, and swap twins, together), so neither a prompt, its twin nor a paraphrase of either is ever on
both sides, and the bootstrap resamples the same groups. Fitting is per_image's (``fit_predict`` / ``oof``: one
logistic pipeline, C by an inner grouped CV on the training rows only).

Kinds of risk (lower = the policy prefers the seed):

* ``oof(X)`` — fitted on the other folds (the prompt is unseen);
* ``inner_oof(X, o)`` — for the prompts outside outer fold ``o``, fitted without fold ``o`` as well: what a
  policy choice made on the training prompts may look at (nested CV, ``pareto.budget_choice``);
* ``signed(x)`` — an unfitted score whose direction is read off the training folds (the CFG gap);
* ``seed_split(X)`` — fitted on seeds 0…S/2−1 of every prompt, for seeds S/2…S−1 (the prompts are seen).

A cache (``probes/.selection_cache/<key>.npy``) keeps every risk computed, keyed by what it depends on
(the features, the labels, the prompts and their fold plan, the seed), so a killed study resumes where
it stopped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...scenes import prompt_groups
from ...select.minimums import MIN_PROMPT_GROUPS
from ..fit import per_image


def _digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return f"{a.shape}:{a.dtype}:" + hashlib.sha1(a.tobytes()).hexdigest()[:16]




@dataclass
class Layout:
    """One category's images as a (prompts, seeds) grid over the run's arrays."""
    category: str
    prompt_ids: list[str]
    groups: np.ndarray  # (P,) prompt group per prompt (scenes.prompt_groups)
    rows: np.ndarray  # (P, S) row index into the run's per-image arrays
    success: np.ndarray  # (P, S) 1.0 passed / 0.0 failed
    folds: list = field(default_factory=list)  # over flattened rows (P·S, prompt-major)
    fold_of_prompt: np.ndarray | None = None
    dropped: int = 0

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows.shape

    @property
    def y_fail(self) -> np.ndarray:
        return (self.success.ravel() < 0.5).astype(int)

    @property
    def image_groups(self) -> np.ndarray:
        return np.repeat(self.groups, self.shape[1])


def layout(category: str, prompts: list[dict], row_of: dict, verdicts: dict, seeds: int, *, n_splits: int = 5,
           seed: int = 0) -> Layout:
    """``row_of``: (prompt_id, sample) → array row; ``verdicts``: (prompt_id, sample) → verdict record."""
    from ..fit.linear import grouped_folds

    mine = [p for p in prompts if str(p.get("category")) == category]
    keep = [p for p in mine if all((p["id"], k) in verdicts and (p["id"], k) in row_of for k in range(seeds))]
    lay = Layout(category, [p["id"] for p in keep], np.array(prompt_groups(keep)),
                 np.array([[row_of[(p["id"], k)] for k in range(seeds)] for p in keep], dtype=int).reshape(-1, seeds),
                 np.array([[float(bool(verdicts[(p["id"], k)]["verdict"])) for k in range(seeds)] for p in keep],
                          dtype=float).reshape(-1, seeds), dropped=len(mine) - len(keep))
    if len(set(lay.groups.tolist())) >= 2:
        lay.folds = grouped_folds(lay.image_groups, n_splits, seed)
        lay.fold_of_prompt = np.empty(len(keep), dtype=int)
        for f, (_, te) in enumerate(lay.folds):
            lay.fold_of_prompt[np.unique(te // seeds)] = f
    return lay


def too_small(lay: "Layout") -> str | None:
    """Why ``lay`` (one category) cannot be studied, with the minimum; None when it can."""
    n_groups = len(set(lay.groups.tolist()))
    outcomes = len(np.unique(lay.y_fail))
    if n_groups >= MIN_PROMPT_GROUPS and outcomes == 2:
        return None
    have = "both outcomes" if outcomes == 2 else "every image passing" if lay.y_fail.sum() == 0 and len(lay.y_fail) \
        else "every image failing" if len(lay.y_fail) else "no image judged"
    return (f"{lay.shape[0]} prompts in {n_groups} prompt groups with every seed judged, {have}; a category needs "
            f"≥ {MIN_PROMPT_GROUPS} prompt groups with both a passing and a failing image")


class Risks:
    """Risk matrices ``(P, S)`` for one layout, cached on disk under ``cache_dir``."""

    def __init__(self, lay: Layout, cache_dir: Path | None, *, seed: int = 0, tag: str = ""):
        self.lay, self.cache_dir, self.seed, self.tag = lay, cache_dir, seed, tag

    def _cached(self, name: str, parts: list, compute) -> np.ndarray:
        if self.cache_dir is None:
            return compute()
        folds = self.lay.fold_of_prompt.tolist() if self.lay.fold_of_prompt is not None else None
        key = hashlib.sha1(json.dumps([self.tag, self.lay.category, name, self.seed, parts, self.lay.prompt_ids,
                                       folds, self.lay.groups.tolist()], default=str).encode()).hexdigest()[:16]
        path = Path(self.cache_dir) / f"{self.lay.category}.{name}.{key}.npy"
        if path.exists():
            return np.load(path)
        out = compute()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.stem + ".tmp.npy")
        np.save(tmp, out)
        tmp.replace(path)
        return out

    def _X(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(X, np.float32)[self.lay.rows.ravel()]

    def oof(self, name: str, X: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        """``y``: labels to fit on (default the real failures; the permutation control passes shuffled ones)."""
        lay = self.lay
        yy = lay.y_fail if y is None else y
        return self._cached(f"oof-{name}", [_digest(X), _digest(yy)], lambda: per_image.oof(
            self._X(X), yy, lay.image_groups, lay.folds, self.seed).reshape(lay.shape))

    def inner_oof(self, name: str, X: np.ndarray, outer: int) -> np.ndarray:
        """Risks of every prompt outside outer fold ``outer``, from probes that saw neither fold ``outer`` nor
        the prompt's own fold (NaN inside fold ``outer``)."""
        lay = self.lay

        def compute():
            Xr, y, g = self._X(X), lay.y_fail, lay.image_groups
            risk = np.full(len(y), np.nan)
            test_o = lay.folds[outer][1]
            for j, (_, te) in enumerate(lay.folds):
                if j == outer:
                    continue
                train = np.setdiff1d(np.arange(len(y)), np.concatenate([te, test_o]))
                risk[te], _ = per_image.fit_predict(Xr, y, g, train, te, self.seed)
            return risk.reshape(lay.shape)
        return self._cached(f"inner{outer}-{name}", [_digest(X)], compute)

    def signed(self, name: str, x: np.ndarray) -> np.ndarray:
        """An unfitted per-image score (higher = ?) turned into risk with the direction that the training
        folds' AUROC says predicts failure; out of fold like ``oof``."""
        from ... import stats

        lay = self.lay
        v = np.asarray(x, float)[lay.rows.ravel()]
        y = lay.y_fail
        risk = np.full(len(y), np.nan)
        for tr, te in lay.folds:
            a = stats.auroc(y[tr], v[tr])
            risk[te] = v[te] if not (a < 0.5) else -v[te]
        return risk.reshape(lay.shape)

    def seed_split(self, name: str, X: np.ndarray) -> np.ndarray:
        """Fitted on the first half of every prompt's seeds, risk of the second half (NaN on the first)."""
        lay = self.lay
        S = lay.shape[1]

        def compute():
            Xr, y, g = self._X(X), lay.y_fail, lay.image_groups
            sample = np.tile(np.arange(S), lay.shape[0])
            tr, te = np.flatnonzero(sample < S // 2), np.flatnonzero(sample >= S // 2)
            risk = np.full(len(y), np.nan)
            risk[te], _ = per_image.fit_predict(Xr, y, g, tr, te, self.seed)
            return risk.reshape(lay.shape)
        return self._cached(f"seeds-{name}", [_digest(X)], compute)
