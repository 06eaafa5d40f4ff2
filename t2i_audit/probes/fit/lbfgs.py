"""The batched solver of ``logistic.py``: L-BFGS (Nocedal 1980; Liu & Nocedal 1989 — scikit-learn's
default solver, here to a tight tolerance) for every problem at once, with

* a preconditioned two-loop recursion (H0 = γ M⁻¹, γ = sᵀy / yᵀM⁻¹y; Nocedal & Wright, *Numerical
  Optimization*, 2nd ed., §7.2 and algorithm 7.4) where ``M`` flattens the top of the array's feature
  spectrum: real activations are anisotropic (a few directions carry most of the variance, and their
  curvature is what makes L-BFGS crawl); M⁻¹ rescales those of the top ``RANK`` eigen-directions of the
  feature covariance that lie above the mean eigenvalue down to it. It is used where the spectrum is far
  from flat (top eigenvalue > ``FLAT`` × the mean); elsewhere H0 = γ I, as plain L-BFGS;
* a backtracking Armijo line search (c1 = 1e-4, halving) that needs no matmul: logits are affine in
  the parameters, so with the logits Z of the iterate and U = X d of the direction, a trial step t has
  logits Z + t U; a pair is skipped when sᵀy ≤ 1e-10·|s||y| (L-BFGS-B skips on sᵀy ≤ ε too);
* per iteration one float32 matmul for U and one for the gradient, per group of problems that share
  their train rows; the parameters, logits, loss and line search in float64. Accumulating float32 step
  logits drifts (measured ≤ 1e-5 in the logits), so a problem is declared converged only after its
  gradient, recomputed in float64 from its parameters, is ≤ tol; otherwise it resumes from there.
"""

from __future__ import annotations

import numpy as np

from .result import FitResult

HISTORY = 5        # L-BFGS pairs (3 to 20 take 42-45 iterations alike on probe problems, measured)
RANK = 128         # eigen-directions the preconditioner rescales
FLAT = 10.0        # top / mean eigenvalue ratio above which the preconditioner is used
C1, MAX_HALVINGS = 1e-4, 30


def solve(b, init, *, tol, max_iter):
    torch, D = b.torch, b.D
    P = len(b.arr)
    every = np.arange(P)
    theta = torch.zeros((P, b.K, D + 1), dtype=torch.float64, device=b.dev)
    if init is not None:
        theta = torch.as_tensor(init, dtype=torch.float64, device=b.dev) * b.free
    n_iter = np.zeros(P, int)
    gmax = np.full(P, np.inf)
    Zfull = torch.zeros((P, b.K, b.n), dtype=torch.float64, device=b.dev)
    todo = np.flatnonzero(b.free.sum((1, 2)).cpu().numpy() > 0)  # one class: nothing to fit
    gmax[np.setdiff1d(every, todo)] = 0.0
    pre = _Flatten(b)
    for _round in range(3):  # a round ends with every problem's float64 check; those that fail resume, in float64
        if not len(todo):
            break
        t = torch.as_tensor(todo, device=b.dev)
        Zf, g = b.exact(todo, theta[t])
        _run(b, pre, todo, theta, b.train_rows(todo, Zf), g, n_iter, tol, max_iter, precise=_round > 0)
        Zf, g = b.exact(todo, theta[t])
        Zfull[t] = Zf
        gmax[todo] = g.abs().amax((1, 2)).cpu().numpy()
        todo = todo[(gmax[todo] > tol) & (n_iter[todo] < max_iter)]
    proba = torch.softmax(Zfull + b.mask, 1).transpose(1, 2).cpu().numpy()
    th = theta.cpu().numpy()
    return FitResult(proba, th[..., :D], th[..., D], b.mean, b.scale, n_iter, gmax, gmax <= tol)


class _Flatten:
    """M⁻¹ per problem: its array's feature covariance with the eigenvalues above their mean (``rest``)
    flattened to it: ``r/rest + (r V) (1/λ_top − 1/rest) Vᵀ`` on W, identity on the intercept. One
    randomized eigendecomposition per array and unit (Halko, Martinsson & Tropp 2011, algorithm 4.4,
    two power iterations, fixed seed); None where the spectrum is flat."""

    def __init__(self, b):
        self.b, self.eig = b, {}
        self.used = any(self.top(int(b.arr[p]), b.scaled[p]) is not None
                        for p in np.unique(np.c_[b.arr, b.scaled], axis=0, return_index=True)[1])

    def top(self, arr, scaled):
        key = (arr, bool(scaled))
        if key not in self.eig:
            torch, b = self.b.torch, self.b
            s, m = b.spread[arr]
            X = b.X64[arr].float()
            if not scaled:
                X = X * torch.as_tensor(s, dtype=X.dtype, device=b.dev)
            r = min(RANK, b.D)
            if r + 10 >= b.D:
                ev, V = torch.linalg.eigh((X.T @ X).double() / max(m, 1))
            else:
                gen = torch.Generator(device=b.dev).manual_seed(0)
                Q = torch.randn((b.D, r + 10), generator=gen, dtype=X.dtype, device=b.dev)
                for _ in range(3):
                    Q = torch.linalg.qr(X.T @ (X @ Q)).Q
                B = X @ Q
                ev, W = torch.linalg.eigh((B.T @ B).double() / max(m, 1))
                V = Q.double() @ W
            ev, V = ev[-r:].clamp(min=0), V[:, -r:]
            trace = float((X.double() ** 2).sum()) / max(m, 1)
            rest = trace / b.D  # the mean eigenvalue: the level the top ones are flattened to
            keep = ev > rest
            use = rest > 0 and float(ev.max()) > FLAT * rest
            self.eig[key] = (1.0 / ev[keep].float() - 1.0 / rest, V[:, keep].float(), rest) if use else None
        return self.eig[key]

    def __call__(self, idx, r):
        b = self.b
        if not self.used:
            return r
        out = r.clone()
        for arr, lo, hi in b.subruns(idx, by="array"):  # problems of one array share its eigenvectors
            for sc in (True, False):
                sel = lo + np.flatnonzero(b.scaled[idx[lo:hi]] == sc)
                e = self.top(arr, sc) if len(sel) else None
                if e is None:
                    continue
                shrink, V, rest = e
                shrink, V = shrink.to(r.dtype), V.to(r.dtype)
                t = slice(lo, hi) if len(sel) == hi - lo else b.torch.as_tensor(sel, device=b.dev)
                rw = r[t][..., :b.D]
                out[t, ..., :b.D] = rw / rest + ((rw @ V) * shrink) @ V.T
        return out


def _bdot(a, b):
    """Per-problem inner products (q,) of (q, K, ·) tensors (a fused multiply-sum; a batched matmul of
    1-row matrices is ten times slower on CPU, measured)."""
    return (a * b).sum((1, 2))


def _run(b, pre, ids, theta, Z, g, n_iter, tol, max_iter, precise=False):
    """L-BFGS on problems ``ids`` from ``theta[ids]`` (float64 logits Z on their train rows, gradient g)
    until each one's tracked max|∇f| ≤ tol, or its line search finds no decrease; writes ``theta`` and
    ``n_iter``. Finished problems leave the batch once a tenth of it has finished (until then they keep
    iterating, harmlessly). Matmuls and vectors in float32, or float64 when ``precise`` (a problem whose
    float32 run ended short of tol: float32 step logits limit how far the line search can see)."""
    torch, D, m = b.torch, b.D, HISTORY
    dt = torch.float64 if precise else torch.float32
    halvings = MAX_HALVINGS if precise else 12
    dev = b.dev
    ids = np.asarray(ids)
    tids = torch.as_tensor(ids, device=dev)
    th = theta[tids].clone()
    sq = _bdot(th[..., :D], th[..., :D])
    Z = Z + b.floor[tids]           # absent classes at logit -1e30: probability 0, no mask needed later
    wy, w, lam, free = b.wy[tids], b.w[tids], b.lam[tids], b.free[tids]
    wy32, w32 = wy.to(dt), w.to(dt)
    f = _objective(Z, wy, w, lam, sq)
    g = g.to(dt)
    q = len(ids)
    S = torch.zeros((m, q, b.K, D + 1), dtype=dt, device=dev)
    Y = torch.zeros_like(S)
    rho = torch.zeros((m, q), dtype=dt, device=dev)
    gamma = torch.ones(q, dtype=dt, device=dev)
    fresh = torch.ones(q, dtype=torch.bool, device=dev)  # no pair stored yet
    it = 0
    finished, stalled = np.zeros(q, bool), np.zeros(q, bool)
    while True:
        gm = g.abs().amax((1, 2)).cpu().numpy()
        newly = ~finished & ((gm <= tol) | (n_iter[ids] >= max_iter) | stalled)
        if newly.any():
            theta[tids[torch.as_tensor(np.flatnonzero(newly), device=dev)]] = th[torch.as_tensor(newly, device=dev)]
            finished |= newly
        if finished.all():
            return
        if finished.sum() >= max(1, q // 10):  # compact
            keep = torch.as_tensor(~finished, device=dev)
            ids, tids = ids[~finished], tids[keep]
            th, Z, g, f, sq, gamma, fresh, wy, w, wy32, w32, lam, free = (
                x[keep] for x in (th, Z, g, f, sq, gamma, fresh, wy, w, wy32, w32, lam, free))
            S, Y, rho = S[:, keep], Y[:, keep], rho[:, keep]
            q, finished, stalled = len(ids), np.zeros(len(ids), bool), np.zeros(len(ids), bool)
        # two-loop recursion, newest pair first; empty or skipped slots have rho = 0 and change nothing
        order = [(it - 1 - j) % m for j in range(min(it, m))]
        r = g.clone()
        alphas = []
        for k in order:
            a = rho[k] * _bdot(S[k], r)
            r.addcmul_(Y[k], a[:, None, None], value=-1.0)
            alphas.append(a)
        r = pre(ids, r).mul_(gamma[:, None, None])
        for k, a in zip(reversed(order), reversed(alphas)):
            r.addcmul_(S[k], (a - rho[k] * _bdot(Y[k], r))[:, None, None])
        d = r.neg_().mul_(free)
        gd = _bdot(g, d).double()
        bad = ~(gd < 0)
        if bad.any():  # not a descent direction (float error): the preconditioned gradient instead
            d[bad] = -(pre(ids, g) * free)[bad]
            gd = _bdot(g, d).double()
        U = b.lin(ids, d, precise).double()
        ws = _bdot(th[..., :D], d[..., :D].double())
        ss = _bdot(d[..., :D], d[..., :D]).double()
        step = torch.where(fresh, 1.0 / _bdot(d, d).double().sqrt().clamp(min=1e-12), 1.0).clamp(max=1.0)
        ok = ~(gd < 0)  # nothing to gain along d: stay (the float64 check decides)
        f_new = f.clone()
        live = torch.nonzero(~ok).flatten()
        for _ in range(halvings):  # backtracking Armijo; usually one trial, on every problem at once
            if not len(live):
                break
            sel = slice(None) if len(live) == q else live
            tt = step[sel]
            f_t = _objective(Z[sel] + tt[:, None, None] * U[sel], wy[sel], w[sel], lam[sel],
                             sq[sel] + 2 * tt * ws[sel] + tt * tt * ss[sel])
            good = f_t - f[sel] <= C1 * tt * gd[sel]
            f_new[live[good]] = f_t[good]
            ok[live[good]] = True
            step[live[~good]] *= 0.5
            live = live[~good]
        moving = ok & (gd < 0)
        step = torch.where(moving, step, 0.0)
        stalled |= ~moving.cpu().numpy()  # no decrease found: float precision reached for these
        th.add_(step[:, None, None] * d)
        Z.add_(step[:, None, None] * U)
        sq = sq + 2 * step * ws + step * step * ss
        f = torch.where(moving, f_new, f)
        e = (Z - Z.amax(1, keepdim=True)).to(dt).exp_()  # softmax over classes, in the matmuls' precision
        p = e.div_(e.sum(1, keepdim=True))               # (the answer is checked in float64)
        g_new = b.back(ids, p.mul_(w32).sub_(wy32), precise)
        g_new[..., :D] += lam.to(dt)[:, None, None] * th[..., :D].to(dt)
        g_new.mul_(free)
        # the pair as stored (float32); its sᵀy from those very numbers: H stays positive definite
        s_ = d.mul_(step.to(dt)[:, None, None])
        y_ = g_new - g
        sy = (s_.double() * y_.double()).sum((1, 2))
        good = (sy > 1e-10 * _bdot(y_, y_).double().sqrt() * _bdot(s_, s_).double().sqrt()) & (sy > 1e-30)
        k = it % m
        S[k], Y[k] = s_, y_
        rho[k] = torch.where(good, 1.0 / sy.clamp(min=1e-300), 0.0).to(dt)
        Myy = _bdot(y_, pre(ids, y_)).double()
        gamma = torch.where(good, sy / Myy.clamp(min=1e-300), gamma.double()).to(dt)
        fresh = fresh & ~good
        g = g_new
        it += 1
        n_iter[ids[~finished]] += 1


def _objective(Z, wy, w, lam, sq):
    """f (q,): mean train log-loss from float64 logits Z (q, K, m; absent classes at -1e30) + penalty."""
    lse = Z.logsumexp(1)
    return (lse * w[:, 0]).sum(1) - (Z * wy).sum((1, 2)) + 0.5 * lam * sq
