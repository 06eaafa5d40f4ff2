"""The one logistic model of every probe — standardize, then L2 logistic regression fitted to
convergence — for many problems at once, batched on a device (CPU or CUDA).

The model is scikit-learn's (read from sklearn 1.9 ``linear_model/_logistic.py``,
``_logistic_regression_path`` and ``_linear_loss.py``), so ``--probe-backend sklearn`` is its reference:

* ``StandardScaler``: the train rows' mean and population std; near-constant features
  (``preprocessing._data._is_constant_feature``) are scaled by 1;
* objective ``f(W, b) = mean train log-loss + ||W||² / (2·C·n_train)``, the intercept unpenalised
  (``l2_reg_strength = 1 / (C · sw_sum)``);
* 3+ classes: multinomial with one row of W per class (``HalfMultinomialLoss``); exactly 2 classes:
  ONE vector for ``classes[1]`` (``HalfBinomialLoss``), so here the ``classes[0]`` row is pinned at
  logit 0 — a 2-class softmax would be penalised differently. One class: probability 1, no fit
  (sklearn refuses to fit one: "needs samples of at least 2 classes").

f is strictly convex in W, so the answer is the optimum, not a solver's path: every problem runs until
``max|∇f| ≤ tol`` — the measure of sklearn's lbfgs ``tol`` — checked in float64 on the answer itself,
and any solver that converges gives the same probabilities. The solver is ``lbfgs.py``.

Data layout: each array is centred and scaled once (globally); a problem's own standardization is
folded into its weights (``(X − m)/s · w = X · (w/s) − m/s · w``), so problems that share an array share
its matmuls. Problems with the same train rows form a *group* that keeps a float32 copy of just those
rows: the solver's matmuls never touch rows no problem of the group trains on (the CV folds' test rows).
Unscaled problems are centred on their train mean (the intercept absorbs it; ``mean`` says so).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .result import FitResult

EPS = np.finfo(np.float64).eps
TOL = 1e-7           # max|∇f| at which a problem is converged (f: mean log-loss + penalty)
MAX_ITER = 2000      # solver iterations (measured: 40–190 on probe-shaped problems)
SMALL = 1 << 16      # train rows × dims under which a batch multiplies all groups in one batched matmul


def resolve_device(device: str | None) -> str:
    import torch

    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def fit_logistic(arrays: Sequence[np.ndarray], array_of: Sequence[int], labels: np.ndarray,
                 train: np.ndarray, n_classes: int, *, scale: bool | Sequence[bool] = True,
                 C: float | Sequence[float] = 1.0, tol: float = TOL, max_iter: int = MAX_ITER,
                 init: np.ndarray | None = None, device: str | None = "cpu",
                 memory_bytes: int | None = None) -> FitResult:
    """Fit P independent problems; problem p trains on rows ``train[p]`` of ``arrays[array_of[p]]``.

    ``labels[p]`` holds class indices in ``[0, n_classes)`` (-1: row unused). Classes absent from a
    problem's train rows get probability 0; one present class gives probability 1. ``C`` may differ
    per problem (a C grid). ``init``: (P, K, D + 1) starting coefficients and intercepts on the
    standardized features (a warm start; zeros otherwise). All arrays must have one shape (n, D);
    non-finite rows are allowed where no problem trains on them (their probabilities are meaningless).
    """
    import torch

    from .lbfgs import solve

    device = resolve_device(device)
    labels, train = np.asarray(labels), np.asarray(train, bool)
    array_of = np.asarray(array_of, int)
    P = len(array_of)
    scale = np.broadcast_to(np.asarray(scale, bool), (P,))
    Cs = np.broadcast_to(np.asarray(C, float), (P,))
    shape = {np.shape(a) for a in arrays}
    if len(shape) != 1:
        raise ValueError(f"arrays must share one shape, got {sorted(shape)}")
    n, D = shape.pop()
    K = int(n_classes)
    if init is not None and np.shape(init) != (P, K, D + 1):
        raise ValueError(f"init must have shape {(P, K, D + 1)}, got {np.shape(init)}")
    if memory_bytes is None:
        memory_bytes = 2 << 30 if device.startswith("cpu") else 24 << 30
    out = FitResult(np.zeros((P, n, K)), np.zeros((P, K, D)), np.zeros((P, K)), np.zeros((P, D)),
                    np.ones((P, D)), np.zeros(P, int), np.zeros(P), np.zeros(P, bool))
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # TF32's 10-bit mantissa slows convergence
    try:
        for idx in _chunks(array_of, train, n, D, K, memory_bytes):
            batch = _Batch(arrays, array_of[idx], labels[idx], train[idx], K, scale[idx], Cs[idx], device=device)
            res = solve(batch, None if init is None else np.asarray(init)[idx], tol=tol, max_iter=max_iter)
            for field in ("proba", "coef", "intercept", "mean", "scale", "n_iter", "grad_max", "converged"):
                getattr(out, field)[idx] = getattr(res, field)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return out


def _chunks(array_of, train, n, D, K, memory_bytes):
    """Problems in the order the batch wants them (by array, then by train rows), cut into chunks
    of whole arrays within the memory budget."""
    keys = [(int(a), t.tobytes()) for a, t in zip(array_of, train)]
    group = {k: i for i, k in enumerate(dict.fromkeys(sorted(keys, key=lambda k: k[0])))}
    order = sorted(range(len(keys)), key=lambda p: (array_of[p], group[keys[p]]))
    per_problem = 4 * K * (D + 1) * 30 + 8 * n * K * 8   # history, vectors, logits
    chunks, cur, used, seen = [], [], 0, set()
    for p in order:
        new_array = int(array_of[p]) not in {a for a, _ in seen}
        cost = per_problem + (12 * n * D if new_array else 0) + (4 * n * D if keys[p] not in seen else 0)
        if cur and new_array and used + cost > memory_bytes:
            chunks.append(np.array(cur))
            cur, used, seen = [], 0, set()
            cost = per_problem + 16 * n * D
        cur.append(p)
        seen.add(keys[p])
        used += cost
    return chunks + ([np.array(cur)] if cur else [])


class _Batch:
    """The problems of one chunk on the device (sorted by array, then train rows): data,
    standardization, labels and the objective's pieces for any sorted subset of problems."""

    def __init__(self, arrays, array_of, labels, train, K, scale, Cs, *, device):
        import torch

        self.torch, self.dev, self.K = torch, device, K
        f32, f64 = torch.float32, torch.float64
        if (labels[train] < 0).any() or (labels[train] >= K).any():
            raise ValueError("every train row needs a class index in [0, n_classes)")
        used = list(dict.fromkeys(array_of.tolist()))
        self.arr = np.array([used.index(a) for a in array_of])
        P = len(self.arr)
        self.n, self.D = np.shape(arrays[used[0]])
        D = self.D
        n_train = np.maximum(train.sum(1), 1)
        self.scaled = np.asarray(scale, bool)
        self.X64, self.spread = [], []
        a_coef, c_coef = np.zeros((P, D)), np.zeros((P, D))
        self.mean, self.scale = np.zeros((P, D)), np.ones((P, D))
        for i, a in enumerate(used):
            X = np.asarray(arrays[a], np.float64)
            fin = np.isfinite(X).all(1)
            if (train[self.arr == i] & ~fin).any():
                raise ValueError("a train row of a probed array is not finite")
            # global centering and scaling: fold statistics stay near (0, 1), so standardization
            # folded into the weights loses nothing to cancellation
            g = X[fin].mean(0) if fin.any() else np.zeros(D)
            s = X[fin].std(0) if fin.any() else np.ones(D)
            s = np.where(s > 0, s, 1.0)
            Xc = np.where(fin[:, None], (X - g) / s, 0.0)
            ps = np.flatnonzero(self.arr == i)
            w = train[ps] / n_train[ps, None]
            mu_c = w @ Xc  # all problems' train means and variances: two matmuls
            var_c = np.maximum(w @ (Xc * Xc) - mu_c ** 2, 0.0)
            sd_c = np.sqrt(var_c)
            for k, p in enumerate(ps):
                if not scale[p]:  # raw features centred on the train mean: Xc * s + g - mean
                    a_coef[p], c_coef[p] = s, s * mu_c[k]
                    self.mean[p] = g + s * mu_c[k]
                    continue
                # sklearn.preprocessing._data._is_constant_feature scales near-constant features
                # by 1; a one-pass variance cannot tell those apart, so recheck the small ones
                # two-pass, as sklearn computes them
                for j in np.flatnonzero(var_c[k] < 1e-6):
                    col = X[train[p], j]
                    mu, var = col.mean(), col.var()
                    const = var <= len(col) * EPS * var + (len(col) * mu * EPS) ** 2
                    mu_c[k, j], sd_c[k, j] = (mu - g[j]) / s[j], (1.0 / s[j] if const else np.sqrt(var) / s[j])
                # standardized (X - mu)/sd = Xc * (s/sd) - (mu - g)/sd, here in units of s
                a_coef[p], c_coef[p] = 1.0 / sd_c[k], mu_c[k] / sd_c[k]
                self.mean[p], self.scale[p] = g + s * mu_c[k], s * sd_c[k]
            self.X64.append(torch.as_tensor(Xc, dtype=f64, device=device))
            self.spread.append((s, int(fin.sum())))
        self.a64 = torch.as_tensor(a_coef, dtype=f64, device=device)
        self.c64 = torch.as_tensor(c_coef, dtype=f64, device=device)
        self.a32, self.c32 = self.a64.to(f32), self.c64.to(f32)
        # groups: problems of one array with the same train rows, contiguous
        keys = [(int(self.arr[p]), train[p].tobytes()) for p in range(P)]
        first = {}
        for p, k in enumerate(keys):
            first.setdefault(k, p)
        gid = {k: i for i, k in enumerate(first)}
        self.group = np.array([gid[k] for k in keys])
        if np.any(np.diff(self.group) < 0):
            raise ValueError("problems must come sorted by array and train rows")
        self.rows = [np.flatnonzero(train[p]) for p in first.values()]
        self.garr = [int(self.arr[p]) for p in first.values()]
        self.X32 = [self.X64[a][torch.as_tensor(r, device=device)].to(f32) for a, r in zip(self.garr, self.rows)]
        self.m = max(len(r) for r in self.rows)  # rows of the solver's logits: a group's train rows, padded
        self.slot = np.zeros(P, int)  # position of a problem in its group
        for grp in range(len(self.rows)):
            self.slot[self.group == grp] = np.arange((self.group == grp).sum())
        self.Q = int(self.slot.max()) + 1
        self.small = self.m * D <= SMALL
        self._X64g, self._stack = {}, {}
        present = np.zeros((P, K), bool)
        wy = np.zeros((P, K, self.m))  # logits are (problem, class, row): softmaxes run over a strided dim
        w = np.zeros((P, 1, self.m))
        for p in range(P):
            r = self.rows[self.group[p]]
            present[p, np.unique(labels[p][r])] = True
            wy[p, labels[p][r], np.arange(len(r))] = 1.0 / len(r)
            w[p, 0, :len(r)] = 1.0 / len(r)
        free = present.copy()
        for p in np.flatnonzero(present.sum(1) <= 2):  # binary: one vector, for classes[1]; 1 class: none
            free[p, np.flatnonzero(present[p])[0]] = False
        self.free = torch.as_tensor(free, dtype=f32, device=device)[:, :, None]
        self.mask = torch.as_tensor(np.where(present, 0.0, -np.inf), dtype=f64, device=device)[:, :, None]
        self.floor = torch.as_tensor(np.where(present, 0.0, -1e30), dtype=f64, device=device)[:, :, None]
        self.wy = torch.as_tensor(wy, dtype=f64, device=device)  # w_i · y_ik
        self.w = torch.as_tensor(w, dtype=f64, device=device)
        self.lam = torch.as_tensor(1.0 / (Cs * n_train), dtype=f64, device=device)  # l2_reg_strength

    def subruns(self, idx, by="group"):
        """(group or array, start, end) of the positions in sorted ``idx`` that belong to each one."""
        key = self.group if by == "group" else self.arr
        k = key[idx]
        cuts = np.flatnonzero(np.diff(k)) + 1
        return [(int(k[lo]), int(lo), int(hi)) for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(idx)])]

    def _rows(self, grp, dtype):
        """The train rows of a group's array: float32 copies kept, float64 ones made on demand."""
        if dtype == self.torch.float32:
            return self.X32[grp]
        if grp not in self._X64g:
            self._X64g[grp] = self.X64[self.garr[grp]][self.torch.as_tensor(self.rows[grp], device=self.dev)]
        return self._X64g[grp]

    def _stacked(self, dtype):
        """All groups' train rows as one (G, m, D) tensor, zero-padded: small problems multiply with one
        batched matmul, not one per group (whose call overhead would dominate)."""
        if dtype not in self._stack:
            Xs = self.torch.zeros((len(self.rows), self.m, self.D), dtype=dtype, device=self.dev)
            for grp in range(len(self.rows)):
                Xs[grp, :len(self.rows[grp])] = self._rows(grp, dtype)
            self._stack[dtype] = Xs
        return self._stack[dtype]

    def _active(self, idx, dt):
        """The stacked rows of the groups problems ``idx`` belong to, and each problem's (group, slot) there."""
        torch = self.torch
        groups, gi = np.unique(self.group[idx], return_inverse=True)
        Xs = self._stacked(dt)
        if len(groups) < len(Xs):
            Xs = Xs[torch.as_tensor(groups, device=self.dev)]
        return Xs, torch.as_tensor(gi, device=self.dev), torch.as_tensor(self.slot[idx], device=self.dev)

    def lin(self, idx, v, precise=False):
        """Logits (q, K, m) on each problem's train rows of parameters v (q, K, D + 1): ``(W·a) Xᵀ + b − W·c``,
        float32 (float64 if ``precise``)."""
        torch, D, K = self.torch, self.D, self.K
        dt = torch.float64 if precise else torch.float32
        a, c = (self.a64, self.c64) if precise else (self.a32, self.c32)
        v = v.to(dt)
        W = v[..., :D]
        V = W * a[idx][:, None, :]
        if self.small:
            Xs, gi, si = self._active(idx, dt)
            Vp = torch.zeros((len(Xs), self.Q, K, D), dtype=dt, device=self.dev)
            Vp[gi, si] = V
            out = (Vp.view(len(Xs), self.Q * K, D) @ Xs.transpose(1, 2)).view(len(Xs), self.Q, K, self.m)[gi, si]
        else:
            V = V.reshape(len(idx) * K, D)
            out = torch.zeros((len(idx), K, self.m), dtype=dt, device=self.dev)
            for grp, lo, hi in self.subruns(idx):
                X = self._rows(grp, dt)
                out[lo:hi, :, :len(X)] = (V[lo * K:hi * K] @ X.T).view(hi - lo, K, len(X))
        return out.add_((v[..., D] - (W * c[idx][:, None, :]).sum(-1))[:, :, None])

    def back(self, idx, R, precise=False):
        """``Σ_i R_ki z_i`` and ``Σ_i R_ki`` (q, K, D + 1) for dlogits R (q, K, m) on the train rows."""
        torch, D, K = self.torch, self.D, self.K
        dt = torch.float64 if precise else torch.float32
        a, c = (self.a64, self.c64) if precise else (self.a32, self.c32)
        R = R.to(dt)
        if self.small:
            Xs, gi, si = self._active(idx, dt)
            Rp = torch.zeros((len(Xs), self.Q, K, self.m), dtype=dt, device=self.dev)
            Rp[gi, si] = R
            out = (Rp.view(len(Xs), self.Q * K, self.m) @ Xs).view(len(Xs), self.Q, K, D)[gi, si]
        else:
            out = torch.empty((len(idx), K, D), dtype=dt, device=self.dev)
            for grp, lo, hi in self.subruns(idx):
                X = self._rows(grp, dt)
                out[lo:hi] = (R[lo:hi, :, :len(X)].reshape((hi - lo) * K, len(X)) @ X).view(hi - lo, K, D)
        rsum = R.sum(2)
        out.mul_(a[idx][:, None, :]).sub_(rsum[..., None] * c[idx][:, None, :])
        return torch.cat([out, rsum[..., None]], -1)

    def exact(self, idx, theta):
        """float64 logits of every row (q, K, n) and ∇f (q, K, D + 1) of parameters theta (q, K, D + 1)."""
        torch, D, K = self.torch, self.D, self.K
        W = theta[..., :D]
        V = (W * self.a64[idx][:, None, :]).reshape(len(idx) * K, D)
        Z = torch.empty((len(idx), K, self.n), dtype=torch.float64, device=self.dev)
        for arr, lo, hi in self.subruns(idx, by="array"):
            Z[lo:hi] = (V[lo * K:hi * K] @ self.X64[arr].T).view(hi - lo, K, self.n)
        Z.add_((theta[..., D] - (W * self.c64[idx][:, None, :]).sum(-1))[:, :, None])
        p = torch.softmax(self.train_rows(idx, Z) + self.mask[idx], 1)
        g = self.back(idx, p * self.w[idx] - self.wy[idx], precise=True)
        g[..., :D] += self.lam[idx][:, None, None] * W
        return Z, g * self.free[idx]

    def train_rows(self, idx, Z):
        """The train-row logits (q, K, m) of full logits Z (q, K, n)."""
        out = self.torch.zeros((len(idx), self.K, self.m), dtype=Z.dtype, device=self.dev)
        for grp, lo, hi in self.subruns(idx):
            rows = self.torch.as_tensor(self.rows[grp], device=self.dev)
            out[lo:hi, :, :len(rows)] = Z[lo:hi][:, :, rows]
        return out
