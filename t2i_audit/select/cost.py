"""What a seed-selection policy spends per prompt, counted in the units that cost time.

* **denoiser loop iterations** — one pipeline loop step of one image (classifier-free guidance batched:
  one denoiser call on a doubled batch, as diffusers' pipelines make it). A whole image is ``T`` of them;
  a scan to loop index ``s`` is ``s + 1``; continuing a scanned trajectory from its latents costs the
  remaining ``T − s − 1`` (``continuation.py``), regenerating it costs ``T`` again.
* **VAE decodes** — one image decoded: every finished image, and every x0 preview a policy judges.
* **judge calls** — one image judged by the deciding scorer: the final judge picking among K > 1
  finished images (best-of-N by the judge judges all N), or an x0 preview judged during a scan.

``Cost`` adds up; ``seconds`` turns it into time with per-unit seconds measured on one machine
(benchmarks/bench_selection_costs.py writes them), so the judge's cost stands beside the iterations it buys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping


@dataclass(frozen=True)
class Cost:
    iterations: float = 0.0
    decodes: float = 0.0
    judge_calls: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.iterations + other.iterations, self.decodes + other.decodes,
                    self.judge_calls + other.judge_calls)

    def as_dict(self) -> dict:
        return asdict(self)

    def seconds(self, unit: Mapping[str, float]) -> float:
        """Time per prompt from measured seconds per iteration / decode / judge call (``unit`` keys:
        ``iteration``, ``decode``, ``judge_call``)."""
        return (self.iterations * unit["iteration"] + self.decodes * unit["decode"]
                + self.judge_calls * unit["judge_call"])


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
        cost += Cost(iterations=alive * (step - done))
        if previews:
            cost += Cost(decodes=alive, judge_calls=alive)
        alive, done = keep, step
    finish = steps if not continued else steps - done - 1
    return cost + Cost(iterations=alive * finish, decodes=alive, judge_calls=alive if alive > 1 else 0)


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
