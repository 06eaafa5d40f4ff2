"""Many L2 logistic-regression probes fitted at once in torch — scikit-learn's fit, batched.

The reference (``linear._probe``) is ``StandardScaler`` + ``LogisticRegression(C, tol=1e-3,
max_iter=500)`` with the lbfgs solver. What this module reproduces, read from scikit-learn 1.9
``sklearn/linear_model/_logistic.py`` (``_logistic_regression_path``) and ``_linear_loss.py``
(``LinearModelLoss.loss_gradient``), and scipy's L-BFGS-B:

* objective ``mean(log-loss over train rows) + ||W||² / (2·C·n)``, intercept unpenalised;
  3+ classes: multinomial (``HalfMultinomialLoss``) with one row of W per class; exactly 2
  classes: ONE coefficient vector for ``classes[1]`` (``HalfBinomialLoss``) — a 2-class softmax
  would be penalised differently — so here the ``classes[0]`` column is pinned at logit 0;
* standardization with the train rows' mean and population std, near-constant features
  (``preprocessing._data._is_constant_feature``) scaled by 1;
* the solver: scipy ``minimize(method="L-BFGS-B", gtol=tol, ftol=64·eps, maxls=50)`` from
  zeros, no bounds. Unbounded L-BFGS-B is L-BFGS (its compact form equals the two-loop
  recursion with H0 = s'y/y'y), a first step of 1/||g||, the Moré–Thuente line search
  (ftol 1e-3, gtol 0.9, xtol 0.1 — the constants of L-BFGS-B's ``lnsrlb``; the search itself is
  scipy's own port, ``scipy.optimize._dcsrch.DCSRCH``), stop at max|grad| ≤ tol.
  The tolerance is loose (sklearn stops after ~5 iterations on probe-sized data, far from the
  optimum), so matching the *path*, not just the objective, is what makes the numbers agree.

Every problem keeps its own L-BFGS memory, step and line search (they are independent), and
each round evaluates all unfinished problems in one batch: problems that share a feature array
(folds × targets × control of one layer) share one matmul, ``X @ [V_1 … V_q]``. Standardization
is folded into the weights (``(X - m)/s · w = X · (w/s) - m/s · w``), so no per-fold copy of X
is ever made. Deterministic given the inputs (no randomness; fixed reduction order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

EPS = np.finfo(np.float64).eps


@dataclass
class FitResult:
    proba: np.ndarray      # (P, n, K) probabilities for every row of the problem's array
    n_iter: np.ndarray     # (P,) L-BFGS iterations, as sklearn's ``n_iter_``
    converged: np.ndarray  # (P,) max|grad| <= tol reached (sklearn warns otherwise)


def resolve_device(device: str | None) -> str:
    import torch

    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    return str(device)


def default_dtype(device: str):
    """float32: twice float64's speed on CPU; probabilities within ~2e-6 of float64 (measured on
    SDXL-shaped problems), far below how much sklearn's own tol=1e-3 path moves."""
    import torch

    return torch.float32


def fit_logistic(arrays: Sequence[np.ndarray], array_of: Sequence[int], labels: np.ndarray,
                 train: np.ndarray, n_classes: int, *, scale: bool | Sequence[bool] = True,
                 C: float = 1.0, tol: float = 1e-3, max_iter: int = 500, history: int = 10,
                 device: str | None = "cpu", dtype=None, memory_bytes: int | None = None) -> FitResult:
    """Fit P independent problems; problem p trains on rows ``train[p]`` of ``arrays[array_of[p]]``.

    ``labels[p]`` holds class indices in ``[0, n_classes)`` (-1: row unused). Classes absent
    from a problem's train rows get probability 0, as in ``linear._fit_folds``; one present
    class gives probability 1. All arrays must have one shape (n, D); non-finite rows are
    allowed where no problem trains on them (their probabilities are meaningless).
    """
    import torch

    device = resolve_device(device)
    dtype = dtype or default_dtype(device)
    labels, train = np.asarray(labels), np.asarray(train, bool)
    array_of = np.asarray(array_of, int)
    P = len(array_of)
    scale = np.broadcast_to(np.asarray(scale, bool), (P,))
    shape = {np.shape(a) for a in arrays}
    if len(shape) != 1:
        raise ValueError(f"arrays must share one shape, got {sorted(shape)}")
    n, D = shape.pop()
    K = int(n_classes)
    item = torch.finfo(dtype).bits // 8
    if memory_bytes is None:
        memory_bytes = 2 << 30 if device.startswith("cpu") else 24 << 30
    per_problem = item * (K * (D + 1) * (2 * history + 10) + 6 * n * K)
    per_array = item * n * D
    proba = np.zeros((P, n, K))
    n_iter = np.zeros(P, int)
    conv = np.zeros(P, bool)
    # chunks of whole arrays (a problem needs its array) within the memory budget
    chunks: list[list[int]] = [[]]
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
    torch.backends.cuda.matmul.allow_tf32 = False  # TF32 (10-bit mantissa) would leave sklearn's path
    try:
        for chunk in chunks:
            if chunk:
                idx = np.array(chunk)
                res = _Batch(arrays, array_of[idx], labels[idx], train[idx], K, scale[idx], C=C, tol=tol,
                             max_iter=max_iter, history=history, device=device, dtype=dtype).run()
                proba[idx], n_iter[idx], conv[idx] = res.proba, res.n_iter, res.converged
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return FitResult(proba, n_iter, conv)


class _Batch:
    """One batch of problems on the device: the data, the per-problem solver state, the loop.

    Logits are affine in the parameters, so a line search needs no matmul: with the logits Z0
    at the start point and Zd = L(d) of the direction, a trial step t has logits Z0 + t·Zd and
    directional derivative Σ dloss/dZ ⊙ Zd + penalty term. Per iteration that leaves two matmuls
    per array (L(d), and the gradient at the accepted point) where sklearn does two per call.
    """

    def __init__(self, arrays, array_of, labels, train, K, scale, *, C, tol, max_iter, history,
                 device, dtype):
        import torch

        self.torch, self.dev, self.dt = torch, device, dtype
        self.tol, self.max_iter, self.m, self.K = tol, max_iter, history, K
        if (labels[train] < 0).any() or (labels[train] >= K).any():
            raise ValueError("every train row needs a class index in [0, n_classes)")
        used = sorted(set(array_of.tolist()))
        local = {a: i for i, a in enumerate(used)}
        self.arr = np.array([local[a] for a in array_of])
        P = len(self.arr)
        self.n, self.D = np.shape(arrays[used[0]])
        w_train = train / np.maximum(train.sum(1), 1)[:, None]  # (P, n): train-row means
        self.X, a_coef, c_coef = [], np.zeros((P, self.D)), np.zeros((P, self.D))
        for i, a in enumerate(used):
            X = np.asarray(arrays[a], np.float64)
            fin = np.isfinite(X).all(1)
            if (train[self.arr == i] & ~fin).any():
                raise ValueError("a train row of a probed array is not finite")
            # global centering and scaling: fold statistics stay near (0, 1), so standardization
            # folded into the weights loses nothing to cancellation, even in float32
            g = X[fin].mean(0) if fin.any() else np.zeros(self.D)
            s = X[fin].std(0) if fin.any() else np.ones(self.D)
            s = np.where(s > 0, s, 1.0)
            Xc = torch.as_tensor(np.where(fin[:, None], (X - g) / s, 0.0), dtype=dtype, device=device)
            ps = np.flatnonzero(self.arr == i)
            wt = torch.as_tensor(w_train[ps], dtype=dtype, device=device)
            mu_c = (wt @ Xc).double().cpu().numpy()  # all folds' means and variances: two matmuls
            var_c = np.maximum((wt @ (Xc * Xc)).double().cpu().numpy() - mu_c ** 2, 0.0)
            sd_c = np.sqrt(var_c)
            for k, p in enumerate(ps):
                if not scale[p]:  # raw X = Xc * s + g
                    a_coef[p], c_coef[p] = s, -g
                    continue
                # sklearn.preprocessing._data._is_constant_feature scales near-constant features
                # by 1; a one-pass variance cannot tell those apart, so recheck the small ones
                # two-pass in float64, as sklearn computes them
                for j in np.flatnonzero(var_c[k] < 1e-6):
                    col = X[train[p], j]
                    mu, var = col.mean(), col.var()
                    const = var <= len(col) * EPS * var + (len(col) * mu * EPS) ** 2
                    mu_c[k, j], sd_c[k, j] = (mu - g[j]) / s[j], (1.0 / s[j] if const else np.sqrt(var) / s[j])
                # standardized (X - mu)/sd = Xc * (s/sd) - (mu - g)/sd, here in units of s
                a_coef[p], c_coef[p] = 1.0 / sd_c[k], mu_c[k] / sd_c[k]
            self.X.append(Xc)
        self.a = torch.as_tensor(a_coef, dtype=dtype, device=device)[:, None, :]
        self.c = torch.as_tensor(c_coef, dtype=dtype, device=device)[:, None, :]
        present = np.zeros((P, K), bool)
        for p in range(P):
            present[p, np.unique(labels[p][train[p]])] = True
        free = present.copy()
        for p in np.flatnonzero(present.sum(1) <= 2):  # binary: one vector, for classes[1]; 1 class: none
            free[p, np.flatnonzero(present[p])[0]] = False
        self.free = torch.as_tensor(free, dtype=dtype, device=device)[:, :, None]
        self.mask = torch.as_tensor(np.where(present, 0.0, -np.inf), dtype=dtype, device=device)[:, None, :]
        self.onehot = torch.nn.functional.one_hot(torch.as_tensor(np.clip(labels, 0, K - 1), device=device),
                                                  K).to(dtype)
        self.w = torch.as_tensor(w_train, dtype=dtype, device=device)[:, :, None]
        self.l2 = torch.as_tensor(1.0 / (C * np.maximum(train.sum(1), 1)), dtype=dtype, device=device)
        runs, cuts = [], np.flatnonzero(np.diff(self.arr)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, P]):
            runs.append((int(self.arr[lo]), int(lo), int(hi)))
        self.runs = runs  # problems are sorted by array: one contiguous run per array

    # --- the objective, through the logits ---------------------------------------------------
    def _subruns(self, idx):
        """(array, positions in idx) for sorted problem indices idx."""
        out = []
        for arr, lo, hi in self.runs:
            s, e = np.searchsorted(idx, [lo, hi])
            if e > s:
                out.append((arr, int(s), int(e)))
        return out

    def _lin(self, idx, v):
        """Logits of parameters v (the linear map, without the class mask): one matmul per array."""
        W, b = v[..., :self.D], v[..., self.D]
        V = W * self.a[idx]
        out = self.torch.empty((len(idx), self.n, self.K), dtype=self.dt, device=self.dev)
        for arr, lo, hi in self._subruns(idx):
            z = self.X[arr] @ V[lo:hi].reshape((hi - lo) * self.K, self.D).T
            out[lo:hi] = z.view(self.n, hi - lo, self.K).permute(1, 0, 2)
        return out + (b - (W * self.c[idx]).sum(-1))[:, None, :]

    def _loss(self, idx, Z, W):
        """Mean train log-loss + penalty, and its derivative with respect to the logits."""
        logp = self.torch.log_softmax(Z + self.mask[idx], -1)
        w, onehot = self.w[idx], self.onehot[idx]
        ce = -(self.torch.where(onehot * w > 0, logp, 0.0) * w).sum((1, 2))  # -inf of absent classes
        f = ce + 0.5 * self.l2[idx] * (W * W).sum((1, 2))
        return f, (logp.exp() - onehot) * w

    def _grad(self, idx, G, W):
        """Full gradient from dloss/dlogits: one matmul per array."""
        gW = self.torch.empty_like(W)
        for arr, lo, hi in self._subruns(idx):
            Gr = G[lo:hi].permute(1, 0, 2).reshape(self.n, (hi - lo) * self.K)
            gW[lo:hi] = (self.X[arr].T @ Gr).view(self.D, hi - lo, self.K).permute(1, 2, 0)
        gsum = G.sum(1)
        gW = gW * self.a[idx] - gsum[..., None] * self.c[idx] + self.l2[idx][:, None, None] * W
        return self.torch.cat([gW, gsum[..., None]], -1) * self.free[idx]

    # --- the solver: scipy's L-BFGS-B without bounds, one state per problem -----------------
    def run(self) -> FitResult:
        from scipy.optimize._dcsrch import DCSRCH

        torch, D, m = self.torch, self.D, self.m
        P = len(self.arr)
        every = np.arange(P)
        x = torch.zeros((P, self.K, D + 1), dtype=self.dt, device=self.dev)
        Z = torch.zeros((P, self.n, self.K), dtype=self.dt, device=self.dev)  # logits of x = 0
        f, G = self._loss(every, Z, x[..., :D])
        g = self._grad(every, G, x[..., :D])
        S = torch.zeros((m, *x.shape), dtype=self.dt, device=self.dev)  # circular, per problem
        Y = torch.zeros_like(S)
        head, col, theta = np.zeros(P, int), np.zeros(P, int), np.ones(P)
        it, nfun, stp, gd0 = np.zeros(P, int), np.zeros(P, int), np.zeros(P), np.zeros(P)
        x0, Z0, f0, g0 = x.clone(), Z.clone(), f.clone(), g.clone()
        d, Zd = torch.zeros_like(x), torch.zeros_like(Z)
        search: list = [None] * P
        conv = (g.abs().amax((1, 2)) <= self.tol).cpu().numpy()
        done = conv.copy()

        def direction(idx):
            """-H g by the two-loop recursion over each problem's own pairs (H0 = 1/theta)."""
            q = g[idx].clone()
            ages = range(int(col[idx].max()) if len(idx) else 0)
            alpha, rho, slots = [], [], []
            ti = torch.as_tensor(idx, device=self.dev)
            for j in ages:  # newest first
                valid = torch.as_tensor(col[idx] > j, dtype=self.dt, device=self.dev)
                slot = torch.as_tensor((head[idx] - 1 - j) % m, device=self.dev)
                s_j, y_j = S[slot, ti], Y[slot, ti]
                ys = (s_j * y_j).sum((1, 2))
                r_j = valid / torch.where(valid > 0, ys, torch.ones_like(ys))
                a_j = r_j * (s_j * q).sum((1, 2))
                q -= a_j[:, None, None] * y_j
                alpha.append(a_j), rho.append(r_j), slots.append(slot)
            r = q / torch.as_tensor(theta[idx], dtype=self.dt, device=self.dev)[:, None, None]
            for j in reversed(ages):
                s_j, y_j = S[slots[j], ti], Y[slots[j], ti]
                beta = rho[j] * (y_j * r).sum((1, 2))
                r += s_j * (alpha[j] - beta)[:, None, None]
            return -r * self.free[idx]

        def start(idx):
            """New direction and line search for problems idx (sorted)."""
            if len(idx) == 0:
                return
            d[idx] = direction(idx)
            gd = (g[idx] * d[idx]).sum((1, 2)).cpu().numpy()
            bad = idx[~(gd < 0)]
            if len(bad):  # not a descent direction: L-BFGS-B drops its memory (d = -g)
                col[bad], theta[bad] = 0, 1.0
                d[bad] = -g[bad] * self.free[bad]
                gd[~(gd < 0)] = (g[bad] * d[bad]).sum((1, 2)).cpu().numpy()
            Zd[idx] = self._lin(idx, d[idx])
            x0[idx], Z0[idx], f0[idx], g0[idx] = x[idx], Z[idx], f[idx], g[idx]
            dnorm = d[idx].flatten(1).norm(dim=1).cpu().numpy()
            f0n = f0[idx].cpu().numpy()
            for k, p in enumerate(idx):
                gd0[p], nfun[p] = gd[k], 0
                if not gd[k] < 0:  # zero gradient after a reset: nothing left to do
                    done[p] = True
                    continue
                first = min(1.0 / dnorm[k], 1e10) if it[p] == 0 else 1.0  # lnsrlb's first step
                search[p] = DCSRCH(None, None, 1e-3, 0.9, 0.1, 0.0, 1e10)  # lnsrlb's constants
                stp[p], _, _, _ = search[p]._iterate(first, float(f0n[k]), float(gd[k]), b"START")

        start(np.flatnonzero(~done))
        while not done.all():
            act = np.flatnonzero(~done)
            t = torch.as_tensor(stp[act], dtype=self.dt, device=self.dev)
            xt = x0[act] + t[:, None, None] * d[act]
            Zt = Z0[act] + t[:, None, None] * Zd[act]
            ft, Gt = self._loss(act, Zt, xt[..., :D])
            gdt = ((Gt * Zd[act]).sum((1, 2)) + self.l2[act] * (xt[..., :D] * d[act][..., :D]).sum((1, 2)))
            fn, gdn = ft.cpu().numpy(), gdt.cpu().numpy()
            accepted, restart = [], []
            for k, p in enumerate(act):
                nfun[p] += 1
                stp[p], _, _, task = search[p]._iterate(stp[p], float(fn[k]), float(gdn[k]), b"FG")
                if task[:4] in (b"CONV", b"WARN"):  # lnsrlb takes both as the new iterate
                    accepted.append(k)
                elif task[:2] != b"FG" or nfun[p] >= 50 or not np.isfinite(stp[p]):  # maxls=50
                    # failed line search: back to the start point; drop the memory, or stop
                    if col[p] == 0:
                        done[p] = True
                    else:
                        col[p], theta[p] = 0, 1.0
                        restart.append(p)
            if accepted:
                ka = np.array(accepted)
                fin = act[ka]
                x[fin], Z[fin], f[fin] = xt[ka], Zt[ka], ft[ka]
                g[fin] = self._grad(fin, Gt[ka], xt[ka][..., :D])
                it[fin] += 1
                sbg = g[fin].abs().amax((1, 2)).cpu().numpy()
                fo, fn_ = f0[fin].cpu().numpy(), f[fin].cpu().numpy()
                stop = (it[fin] >= self.max_iter) | (sbg <= self.tol) | \
                       (fo - fn_ <= 64 * EPS * np.maximum(np.maximum(np.abs(fo), np.abs(fn_)), 1.0))
                conv[fin] = sbg <= self.tol
                done[fin[stop]] = True
                go = fin[~stop]
                if len(go):
                    s_new, y_new = x[go] - x0[go], g[go] - g0[go]
                    dr = (s_new * y_new).sum((1, 2)).cpu().numpy()
                    rr = (y_new * y_new).sum((1, 2)).cpu().numpy()
                    ok = dr > EPS * (-gd0[go] * stp[go])  # else L-BFGS-B skips the update
                    upd = go[ok]
                    if len(upd):
                        tu = torch.as_tensor(upd, device=self.dev)
                        slot = torch.as_tensor(head[upd], device=self.dev)
                        S[slot, tu], Y[slot, tu] = s_new[ok], y_new[ok]
                        head[upd] = (head[upd] + 1) % m
                        col[upd] = np.minimum(col[upd] + 1, m)
                        theta[upd] = rr[ok] / dr[ok]
                    restart.extend(go.tolist())
            start(np.array(sorted(restart), int))
        proba = torch.softmax(Z + self.mask, -1).cpu().numpy()
        return FitResult(proba.astype(np.float64), it, conv)
