"""The one logistic pipeline of every probe: standardize, then L2 logistic regression fitted to
convergence — many problems at once, batched on a device (CPU or CUDA).

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

f is strictly convex in W, so the answer is the optimum, not a solver's path: each problem runs
until ``max|∇f| ≤ tol`` — the measure of sklearn's lbfgs ``tol`` — and any solver that converges
gives the same probabilities.

The solver is a truncated Newton method with a line search, as LIBLINEAR 2.50's ``newton.cpp``
(Galli & Lin, "A study on truncated Newton methods for linear classification", IEEE TNNLS 2022):
the Newton system is solved inexactly by preconditioned conjugate gradients stopped by the
quadratic-model rule ``j · (Q_j − Q_{j−1}) ≥ min(0.1, √‖g‖_{M⁻¹}) · Q_j``, then a backtracking Armijo
line search (η = 0.01, halving). Newton's few iterations suit these problems (hundreds to thousands
of rows, up to thousands of dims, nearly separable at C = 1). The preconditioner is ``(A ⊗ Σ + λ)⁻¹``
(a Kronecker-factored curvature, as K-FAC, Martens & Grosse 2015): ``A = Σ_i w_i (diag p_i − p_i p_iᵀ)``
per problem and Σ the array's feature covariance, whose eigenvectors every problem of the array
shares — it removes the feature correlations of real activations, which a diagonal preconditioner
(LIBLINEAR's) leaves to CG.

Batched: every problem keeps its own CG and line search (they are independent); each round does
all unfinished problems' Hessian-vector products at once, and problems that share a feature array
(folds × targets × controls × C grid of one array) share one matmul ``X @ [V_1 … V_q]``. The logits
are affine in the parameters, so CG accumulates the step's logits (``Σ α_j X d_j``) and the line
search needs no matmul. Standardization is folded into the weights (``(X − m)/s · w = X · (w/s) − m/s · w``),
so no per-fold copy of X is ever made. Precision: the Hessian products (CG) run in float32; the
parameters, the logits at each Newton iterate and the gradient in float64 — float32 logits alone
leave a gradient floor near 4e-7 (measured). Deterministic given the inputs and the thread count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

EPS = np.finfo(np.float64).eps
TOL = 1e-7           # max|∇f| at which a problem is converged (f: mean log-loss + penalty)
MAX_ITER = 100       # Newton iterations (measured: 8–15 on probe-shaped problems)
EPS_CG = 0.1         # LIBLINEAR's CG tolerance cap
ETA, MAX_HALVINGS = 0.01, 20  # LIBLINEAR's line search
RANK = 128           # eigenvectors of the feature covariance the preconditioner resolves


@dataclass
class FitResult:
    proba: np.ndarray      # (P, n, K) probabilities for every row of the problem's array
    coef: np.ndarray       # (P, K, D) on standardized features (binary: row classes[1] is sklearn's coef_)
    intercept: np.ndarray  # (P, K)
    mean: np.ndarray       # (P, D) the standardization of each problem: z = (x - mean) / scale
    scale: np.ndarray      # (P, D)
    n_iter: np.ndarray     # (P,) Newton iterations
    grad_max: np.ndarray   # (P,) max|∇f| at the answer
    converged: np.ndarray  # (P,) grad_max <= tol


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
    per_problem = 8 * K * (D + 1) * 12 + 8 * n * K * 10
    per_array = 12 * n * D + 4 * D * D
    out = FitResult(np.zeros((P, n, K)), np.zeros((P, K, D)), np.zeros((P, K)), np.zeros((P, D)),
                    np.ones((P, D)), np.zeros(P, int), np.zeros(P), np.zeros(P, bool))
    chunks: list[list[int]] = [[]]  # whole arrays per chunk (a problem needs its array), within the budget
    used, arrays_in = 0, set()
    for p in np.argsort(array_of, kind="stable"):
        cost = per_problem + (0 if array_of[p] in arrays_in else per_array)
        if chunks[-1] and used + cost > memory_bytes and array_of[p] not in arrays_in:
            chunks.append([])
            used, arrays_in = 0, set()
            cost = per_problem + per_array
        chunks[-1].append(int(p))
        arrays_in.add(array_of[p])
        used += cost
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # TF32's 10-bit mantissa would slow CG down
    try:
        for chunk in chunks:
            if not chunk:
                continue
            idx = np.array(chunk)
            batch = _Batch(arrays, array_of[idx], labels[idx], train[idx], K, scale[idx], Cs[idx], device=device)
            res = _newton(batch, None if init is None else np.asarray(init)[idx], tol=tol, max_iter=max_iter)
            for field in ("proba", "coef", "intercept", "mean", "scale", "n_iter", "grad_max", "converged"):
                getattr(out, field)[idx] = getattr(res, field)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return out


class _Batch:
    """The problems of one chunk on the device: data, standardization, labels, and the objective's
    pieces (logits, loss, gradient, Hessian-vector product) for any sorted subset of problems."""

    def __init__(self, arrays, array_of, labels, train, K, scale, Cs, *, device):
        import torch

        self.torch, self.dev, self.K = torch, device, K
        f32, f64 = torch.float32, torch.float64
        if (labels[train] < 0).any() or (labels[train] >= K).any():
            raise ValueError("every train row needs a class index in [0, n_classes)")
        used = sorted(set(array_of.tolist()))
        local = {a: i for i, a in enumerate(used)}
        self.arr = np.array([local[a] for a in array_of])
        P = len(self.arr)
        self.n, self.D = np.shape(arrays[used[0]])
        n_train = np.maximum(train.sum(1), 1)
        w_train = train / n_train[:, None]  # (P, n): train-row means
        self.X32, self.X64, self.stats, self.eig = [], [], [], {}
        self.scaled = np.asarray(scale, bool)
        a_coef, c_coef = np.zeros((P, self.D)), np.zeros((P, self.D))
        self.mean, self.scale = np.zeros((P, self.D)), np.ones((P, self.D))
        for i, a in enumerate(used):
            X = np.asarray(arrays[a], np.float64)
            fin = np.isfinite(X).all(1)
            if (train[self.arr == i] & ~fin).any():
                raise ValueError("a train row of a probed array is not finite")
            # global centering and scaling: fold statistics stay near (0, 1), so standardization
            # folded into the weights loses nothing to cancellation
            g = X[fin].mean(0) if fin.any() else np.zeros(self.D)
            s = X[fin].std(0) if fin.any() else np.ones(self.D)
            s = np.where(s > 0, s, 1.0)
            Xc = np.where(fin[:, None], (X - g) / s, 0.0)
            ps = np.flatnonzero(self.arr == i)
            mu_c = w_train[ps] @ Xc  # all folds' means and variances: two matmuls
            var_c = np.maximum(w_train[ps] @ (Xc * Xc) - mu_c ** 2, 0.0)
            sd_c = np.sqrt(var_c)
            for k, p in enumerate(ps):
                if not scale[p]:  # raw features, centred on the train mean (the intercept absorbs it)
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
            X64 = torch.as_tensor(Xc, dtype=f64, device=device)
            self.X64.append(X64)
            self.X32.append(X64.to(f32))
            self.stats.append((s, int(fin.sum())))
        self.a64 = torch.as_tensor(a_coef, dtype=f64, device=device)
        self.c64 = torch.as_tensor(c_coef, dtype=f64, device=device)
        self.a32, self.c32 = self.a64.to(f32), self.c64.to(f32)
        present = np.zeros((P, K), bool)
        for p in range(P):
            present[p, np.unique(labels[p][train[p]])] = True
        free = present.copy()
        for p in np.flatnonzero(present.sum(1) <= 2):  # binary: one vector, for classes[1]; 1 class: none
            free[p, np.flatnonzero(present[p])[0]] = False
        self.free = torch.as_tensor(free, dtype=f32, device=device)[:, :, None]
        self.mask = torch.as_tensor(np.where(present, 0.0, -np.inf), dtype=f64, device=device)[:, None, :]
        onehot = np.zeros((P, self.n, K))
        rows = np.nonzero(train)
        onehot[rows[0], rows[1], labels[rows]] = 1.0
        self.wy = torch.as_tensor(onehot * w_train[:, :, None], dtype=f64, device=device)  # w_i · y_ik
        self.w64 = torch.as_tensor(w_train, dtype=f64, device=device)[:, :, None]
        self.w32 = self.w64.to(f32)
        self.lam = torch.as_tensor(1.0 / (Cs * n_train), dtype=f64, device=device)  # l2_reg_strength
        cuts = np.flatnonzero(np.diff(self.arr)) + 1
        self.runs = [(int(self.arr[lo]), int(lo), int(hi)) for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, P])]

    def subruns(self, idx):
        """(array, start, end) of the positions in sorted ``idx`` that use each array."""
        out = []
        for arr, lo, hi in self.runs:
            s, e = np.searchsorted(idx, [lo, hi])
            if e > s:
                out.append((arr, int(s), int(e)))
        return out

    def lin(self, idx, v, exact=False):
        """Logits (q, n, K) of parameters v (q, K, D + 1) of problems idx: one matmul per array
        (float64 when ``exact``, else float32)."""
        X, a, c = (self.X64, self.a64, self.c64) if exact else (self.X32, self.a32, self.c32)
        v = v.to(X[0].dtype)
        W = v[..., :self.D]
        V = W * a[idx][:, None, :]
        out = self.torch.empty((len(idx), self.n, self.K), dtype=v.dtype, device=self.dev)
        for arr, lo, hi in self.subruns(idx):
            z = X[arr] @ V[lo:hi].reshape((hi - lo) * self.K, self.D).T
            out[lo:hi] = z.view(self.n, hi - lo, self.K).permute(1, 0, 2)
        return out + (v[..., self.D] - (W * c[idx][:, None, :]).sum(-1))[:, None, :]

    def back(self, idx, R, exact=False):
        """``Σ_i R_ik z_i`` and ``Σ_i R_ik`` as (q, K, D + 1) for dlogits R (q, n, K) on the standardized
        rows: one matmul per array."""
        X, a, c = (self.X64, self.a64, self.c64) if exact else (self.X32, self.a32, self.c32)
        R = R.to(X[0].dtype)
        out = self.torch.empty((len(idx), self.K, self.D), dtype=R.dtype, device=self.dev)
        for arr, lo, hi in self.subruns(idx):
            Rr = R[lo:hi].permute(1, 0, 2).reshape(self.n, (hi - lo) * self.K)
            out[lo:hi] = (X[arr].T @ Rr).view(self.D, hi - lo, self.K).permute(1, 2, 0)
        rsum = R.sum(1)
        out = out * a[idx][:, None, :] - rsum[..., None] * c[idx][:, None, :]
        return self.torch.cat([out, rsum[..., None]], -1)

    def loss(self, idx, Z, sq):
        """f (q,) from float64 logits Z (q, n, K) and ||W||² (q,); probabilities (q, n, K)."""
        logp = self.torch.log_softmax(Z + self.mask[idx], -1)
        wy = self.wy[idx]
        ce = -(self.torch.where(wy > 0, logp, 0.0) * wy).sum((1, 2))  # -inf of absent classes
        return ce + 0.5 * self.lam[idx] * sq, logp.exp()

    def grad(self, idx, p, theta):
        """∇f (q, K, D + 1) in float64 at probabilities p of parameters theta."""
        g = self.back(idx, p * self.w64[idx] - self.wy[idx], exact=True)
        g[..., :self.D] += self.lam[idx][:, None, None] * theta[..., :self.D]
        return g * self.free[idx]

    def hess_vec(self, idx, p, v):
        """H v (q, K, D + 1) and the logits of v (q, n, K), float32: the multinomial Hessian in logit
        space is ``diag(p) − p pᵀ`` per row."""
        U = self.lin(idx, v)
        R = (p * U - p * (p * U).sum(-1, keepdim=True)) * self.w32[idx]
        h = self.back(idx, R)
        h[..., :self.D] += self.lam[idx].float()[:, None, None] * v[..., :self.D]
        return h * self.free[idx], U

    def covariance_eig(self, arr, scaled):
        """The top ``RANK`` eigenpairs of the array's feature covariance, in the units its problems use
        (globally standardized, or raw for unscaled problems), and the mean of the other eigenvalues;
        once per array, by a randomized range finder with two power iterations (Halko, Martinsson &
        Tropp 2011, algorithm 4.4) from a fixed seed."""
        key = (arr, bool(scaled))
        if key not in self.eig:
            torch = self.torch
            s, m = self.stats[arr]
            X = self.X32[arr]
            if not scaled:
                X = X * torch.as_tensor(s, dtype=X.dtype, device=self.dev)
            r = min(RANK, self.D)
            if r + 10 >= self.D:
                ev, V = torch.linalg.eigh((X.T @ X).double() / max(m, 1))
            else:
                gen = torch.Generator(device=self.dev).manual_seed(0)
                Q = torch.randn((self.D, r + 10), generator=gen, dtype=X.dtype, device=self.dev)
                for _ in range(3):
                    Q = torch.linalg.qr(X.T @ (X @ Q)).Q
                B = X @ Q
                ev, W = torch.linalg.eigh((B.T @ B).double() / max(m, 1))
                V = Q.double() @ W
            ev = ev.clamp(min=0)
            trace = float((X.double() ** 2).sum()) / max(m, 1)
            top, V = ev[-r:], V[:, -r:]
            rest = max(trace - float(top.sum()), 0.0) / (self.D - r) if r < self.D else 0.0
            self.eig[key] = (top.float(), V.float(), rest)
        return self.eig[key]


class _Kfac:
    """The preconditioner ``M⁻¹ = (A ⊗ Σ + λ)⁻¹`` of a set of problems; ``keep`` drops finished ones."""

    def __init__(self, b: _Batch, idx, p):
        torch = b.torch
        self.b, self.idx = b, idx
        Pw = p * b.w32[idx]
        A = torch.diag_embed(Pw.sum(1)) - torch.einsum("qnk,qnl->qkl", Pw, p)
        F = b.free[idx][..., 0]
        A = A * F[:, :, None] * F[:, None, :] + torch.diag_embed(1 - F)  # pinned/absent classes: identity
        self.S, self.U = torch.linalg.eigh(A.double())
        self.S, self.U = self.S.clamp(min=0).float(), self.U.float()
        self.lam, self.free = b.lam[idx].float(), b.free[idx]

    def keep(self, mask):
        m = mask.cpu().numpy()
        self.idx = self.idx[m]
        self.S, self.U, self.lam, self.free = self.S[mask], self.U[mask], self.lam[mask], self.free[mask]

    def __call__(self, r):
        b, torch = self.b, self.b.torch
        out = torch.empty_like(r)
        for arr, lo, hi in b.subruns(self.idx):
            for sc in (True, False):
                sel = lo + np.flatnonzero(b.scaled[self.idx[lo:hi]] == sc)
                if not len(sel):
                    continue
                ev, V, rest = b.covariance_eig(arr, sc)
                t = torch.as_tensor(sel, device=b.dev) if len(sel) < hi - lo else slice(lo, hi)
                U, S, lam = self.U[t], self.S[t], self.lam[t]
                rw = r[t][..., :b.D]
                top = rw @ V
                Ut = U.transpose(1, 2)
                T = Ut @ top / (S[:, :, None] * ev + lam[:, None, None])
                w = (U @ T) @ V.T
                if V.shape[1] < b.D:  # the other directions, with the mean of their eigenvalues
                    w = w + U @ (Ut @ (rw - top @ V.T) / (S[:, :, None] * rest + lam[:, None, None]))
                tb = (Ut @ r[t][..., b.D, None])[..., 0] / (S + lam[:, None])
                out[t] = torch.cat([w, U @ tb[..., None]], -1)
        return out * self.free


def _dot(a, b):
    """Per-problem inner products (q,), summed in float64."""
    import torch

    return (a * b).sum((1, 2), dtype=torch.float64)


def _newton(b: _Batch, init, *, tol, max_iter) -> FitResult:
    """Truncated Newton with preconditioned CG and an Armijo line search, per problem, batched."""
    torch, D = b.torch, b.D
    P = len(b.arr)
    every = np.arange(P)
    theta = torch.zeros((P, b.K, D + 1), dtype=torch.float64, device=b.dev)
    if init is not None:
        theta = torch.as_tensor(init, dtype=torch.float64, device=b.dev) * b.free
    Z = b.lin(every, theta, exact=True)
    sq = _dot(theta[..., :D], theta[..., :D])
    f, p = b.loss(every, Z, sq)
    g = b.grad(every, p, theta)
    gmax = g.abs().amax((1, 2))
    n_iter = np.zeros(P, int)
    done = (gmax <= tol).cpu().numpy() | (b.free.sum((1, 2)) == 0).cpu().numpy()
    for _ in range(max_iter):
        act = np.flatnonzero(~done)
        if not len(act):
            break
        ta = torch.as_tensor(act, device=b.dev)
        ga, pa = g[ta], p[ta]
        s, Zs = _pcg(b, act, ga.float(), pa.float())
        # backtracking line search on the step's logits (no matmul): f(θ + t s) − f(θ) ≤ η t gᵀs
        s64 = s.double()
        gs = _dot(ga, s64)
        th = theta[ta]
        ws, ss = _dot(th[..., :D], s64[..., :D]), _dot(s64[..., :D], s64[..., :D])
        t = torch.ones(len(act), dtype=torch.float64, device=b.dev)
        ok = torch.zeros(len(act), dtype=torch.bool, device=b.dev)
        Za, fa, sqa = Z[ta], f[ta], sq[ta]
        for _ls in range(MAX_HALVINGS):
            todo = torch.nonzero(~ok).flatten()
            if not len(todo):
                break
            tt = t[todo]
            f_t, _ = b.loss(act[todo.cpu().numpy()], Za[todo] + tt[:, None, None] * Zs[todo],
                            sqa[todo] + 2 * tt * ws[todo] + tt * tt * ss[todo])
            good = f_t - fa[todo] <= ETA * tt * gs[todo]
            ok[todo[good]] = True
            t[todo[~good]] *= 0.5
        okn = ok.cpu().numpy()
        done[act[~okn]] = True  # the line search failed: precision reached; ``converged`` says if enough
        moved = act[okn]
        if not len(moved):
            break
        tm = torch.as_tensor(moved, device=b.dev)
        theta[tm] = th[ok] + t[ok][:, None, None] * s64[ok]
        # the new iterate's logits afresh in float64 (accumulating float32 step logits drifts)
        Z[tm] = b.lin(moved, theta[tm], exact=True)
        sq[tm] = _dot(theta[tm][..., :D], theta[tm][..., :D])
        f[tm], p[tm] = b.loss(moved, Z[tm], sq[tm])
        g[tm] = b.grad(moved, p[tm], theta[tm])
        gmax[tm] = g[tm].abs().amax((1, 2))
        n_iter[moved] += 1
        done[moved] = (gmax[tm] <= tol).cpu().numpy()
    proba = torch.softmax(Z + b.mask, -1).cpu().numpy()
    th = theta.cpu().numpy()
    gm = gmax.cpu().numpy()
    return FitResult(proba, th[..., :D], th[..., D], b.mean, b.scale, n_iter, gm, gm <= tol)


def _pcg(b: _Batch, act, g, p):
    """Preconditioned CG on ``H s = −g`` for problems ``act`` (float32), each stopped by LIBLINEAR's
    quadratic rule; returns the steps (q, K, D + 1) and their logits (q, n, K). Finished problems
    leave the batch (their state is compacted away), so later rounds multiply fewer columns."""
    torch = b.torch
    q = len(act)
    S_out = torch.zeros_like(g)
    Z_out = torch.zeros((q, b.n, b.K), dtype=torch.float32, device=b.dev)
    M = _Kfac(b, act, p)
    pos = torch.arange(q, device=b.dev)
    idx = act
    s, Zs = torch.zeros_like(g), torch.zeros_like(Z_out)
    r = -g
    z = M(r)
    d = z
    zr = _dot(z, r)
    cgtol = torch.clamp(zr.sqrt().sqrt(), max=EPS_CG)
    Q = torch.zeros(q, dtype=torch.float64, device=b.dev)
    for j in range(1, 10 * (b.D + 1) + 1):
        Hd, U = b.hess_vec(idx, p, d)
        dHd = _dot(d, Hd)
        alpha = torch.where(dHd > 0, zr / dHd, 0.0).float()
        s = s + alpha[:, None, None] * d
        Zs = Zs + alpha[:, None, None] * U
        r = r - alpha[:, None, None] * Hd
        newQ = -0.5 * (_dot(s, r) - _dot(s, g))
        Qdiff = newQ - Q
        descent = (newQ <= 0) & (Qdiff <= 0) & (dHd > 0)
        stop = ~descent | (j * Qdiff >= cgtol * newQ)
        Q = newQ
        if stop.any():
            S_out[pos[stop]], Z_out[pos[stop]] = s[stop], Zs[stop]
            keep = ~stop
            if not keep.any():
                break
            pos, idx = pos[keep], idx[keep.cpu().numpy()]
            s, Zs, r, d, zr, Q, cgtol, g, p = (x[keep] for x in (s, Zs, r, d, zr, Q, cgtol, g, p))
            M.keep(keep)
        z = M(r)
        zr_new = _dot(z, r)
        d = z + (zr_new / zr).float()[:, None, None] * d
        zr = zr_new
    else:
        S_out[pos], Z_out[pos] = s, Zs
    return S_out, Z_out.double()
