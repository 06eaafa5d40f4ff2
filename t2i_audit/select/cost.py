"""What a seed-selection policy spends per prompt, counted in the units that cost time.

* **denoiser loop iterations** — one pipeline loop step of one image (classifier-free guidance batched:
  one denoiser call on a doubled batch, as diffusers' pipelines make it). A whole image is ``T`` of them;
  a scan to loop index ``s`` is ``s + 1``; continuing a scanned trajectory from its latents costs the
  remaining ``T − s − 1`` (``continuation.py``), regenerating it costs ``T`` again.
* **VAE decodes** — one image decoded: every finished image, and every x0 preview a policy judges.
* **judge calls** — one image judged by the deciding scorer: the final judge picking among K > 1
  finished images (best-of-N by the judge judges all N), or an x0 preview judged during a scan.

``Cost`` adds up, and keeps where its iterations went: **scan iterations** run with the capture the ranking
needs (attention maps and pooled blocks for the probe, per-head maps for raw slot maps, the x0 latents for a
preview; and the snapshot a continuation starts from), **continued iterations** run from a snapshot, the rest
plain; and **reads** — one risk computed per scanned seed per rung. ``seconds`` turns it into time with per-unit
seconds measured on one machine in one run (``benchmarks/bench_selection_costs.py``): what the user pays, the
scan's own work and the judge's included, beside the count of iterations.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Mapping


@dataclass(frozen=True)
class Cost:
    iterations: float = 0.0
    decodes: float = 0.0
    judge_calls: float = 0.0
    # where the iterations went (part of ``iterations``), and the probe reads: the breakdown seconds need; two
    # costs of the same counts compare equal whatever their breakdown
    scan_iterations: float = field(default=0.0, compare=False)
    continued_iterations: float = field(default=0.0, compare=False)
    reads: float = field(default=0.0, compare=False)

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def scaled(self, w: float) -> "Cost":
        return Cost(*(getattr(self, f.name) * w for f in fields(self)))

    def as_dict(self) -> dict:
        return asdict(self)

    def seconds(self, unit: Mapping, score: str | None = None, judge: str | None = None) -> float:
        """Time per prompt from measured seconds per unit (``unit``: ``iteration``, ``decode``, ``judge_call``;
        optional ``scan_iteration`` {score: s}, ``continued_iteration``, ``read``, ``judge_call_by`` {judge: s}).
        ``score``: the ranking whose capture the scan iterations carry; ``judge``: who makes the judge calls (None:
        the final judge). A unit not measured counts as a plain iteration (reads as nothing)."""
        plain = self.iterations - self.scan_iterations - self.continued_iterations
        scan = (unit.get("scan_iteration") or {}).get(score, unit["iteration"]) if score else unit["iteration"]
        judge_s = (unit.get("judge_call_by") or {}).get(judge, unit["judge_call"]) if judge else unit["judge_call"]
        return (plain * unit["iteration"] + self.scan_iterations * scan
                + self.continued_iterations * unit.get("continued_iteration", unit["iteration"])
                + self.reads * unit.get("read", 0.0) + self.decodes * unit["decode"] + self.judge_calls * judge_s)


def whole_images(n: int, steps: int) -> Cost:
    """``n`` images generated in full; with ``n > 1`` the final judge judges each and keeps a passing one."""
    return Cost(iterations=n * steps, decodes=n, judge_calls=n if n > 1 else 0)


def staged(n_of: int, rungs: list[tuple[int, int]], steps: int, *, continued: bool = True,
           previews: bool = False) -> Cost:
    """Scan ``n_of`` seeds and cut them at ``rungs`` ``[(loop index, survivors), …]`` (ascending steps): every
    survivor runs on from where it stopped; the last rung's survivors are finished (continued from their
    latents, or regenerated from step 0 when ``continued`` is False — only one rung can be regenerated).
    ``previews``: the ranking judges an x0 preview of every seed alive at each rung (a decode and a judge
    call each). More than one finished image: the final judge judges them all and keeps a passing one."""
    if not rungs or any(b[0] <= a[0] for a, b in zip(rungs, rungs[1:])):
        raise ValueError(f"rungs {rungs}: at least one, loop steps strictly increasing")
    if not continued and len(rungs) > 1:
        raise ValueError("regenerating the survivors is defined for one rung only")
    alive, done, cost = n_of, -1, Cost()
    for step, keep in rungs:
        if not 1 <= keep <= alive:
            raise ValueError(f"rung at step {step}: keep {keep} of {alive}")
        cost += Cost(iterations=alive * (step - done), scan_iterations=alive * (step - done), reads=alive)
        if previews:
            cost += Cost(decodes=alive, judge_calls=alive)
        alive, done = keep, step
    if not continued:
        return cost + Cost(iterations=alive * steps, decodes=alive, judge_calls=alive if alive > 1 else 0)
    finish = steps - done - 1
    return cost + Cost(iterations=alive * finish, continued_iterations=alive * finish, decodes=alive,
                       judge_calls=alive if alive > 1 else 0)


def selection_cost(n_of: int, keep: int, step: int, steps: int) -> dict:
    """What "scan N to loop index s, continue the best K" spends per prompt, counted here,
    against best-of-N whole images judged by the final judge."""
    spent, full = staged(n_of, [(step, keep)], steps), whole_images(n_of, steps)
    scan_cost = n_of * (step + 1)
    return {"unit": "per prompt: denoiser loop iterations (classifier-free guidance batched: one call each), VAE "
                    "decodes, judge calls; the random seeds finished beside (--baseline) measure the lift and are "
                    "not the policy's cost",
            "scan": scan_cost, "finish": spent.iterations - scan_cost, "selected_total": spent.iterations,
            "decodes": spent.decodes, "judge_calls": spent.judge_calls,
            "regenerated_instead": scan_cost + keep * steps,  # what finishing the kept seeds from noise would cost
            "best_of_n_by_final_judge": full.iterations, "best_of_n": full.as_dict(),
            "saved_fraction": 1 - spent.iterations / full.iterations}
