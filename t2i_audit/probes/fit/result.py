"""What ``logistic.fit_logistic`` returns, in a module of its own: the solver (``lbfgs``) builds it
and ``logistic`` calls the solver, so neither may hold it without an import circle."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class FitResult:
    proba: np.ndarray      # (P, n, K) probabilities for every row of the problem's array
    coef: np.ndarray       # (P, K, D) on standardized features (binary: row classes[1] is sklearn's coef_)
    intercept: np.ndarray  # (P, K)
    mean: np.ndarray       # (P, D) the standardization of each problem: z = (x - mean) / scale
    scale: np.ndarray      # (P, D)
    n_iter: np.ndarray     # (P,) solver iterations
    grad_max: np.ndarray   # (P,) max|∇f| at the answer, in float64
    converged: np.ndarray  # (P,) grad_max <= tol
