"""The least a run must hold before a seed selection is studied or chosen on it (the selection study, the
binding study, a ``--budget`` choice); below, the command says so and what to make, instead of printing NaN or
an empty study. The study's per-category check (``probes/studies/risks.too_small``) reads these."""

from __future__ import annotations

MIN_SEEDS = 2  # selection ranks the seeds of one prompt: with one seed there is nothing to choose among
MIN_PROMPT_GROUPS = 5  # grouped 5-fold CV needs a prompt group per fold (stats.MIN_UNITS: independent units)


def seeds_refusal(root, seeds: int, what: str) -> str | None:
    """The refusal when a run has fewer than MIN_SEEDS images per prompt for ``what``, with what to do."""
    if seeds >= MIN_SEEDS:
        return None
    return (f"{root}: {what} ranks the seeds of each prompt, and this run has {seeds} image per prompt (it needs "
            f"≥ {MIN_SEEDS}; the pre-registered headline scans 6). Extend the run: rerun the command that made it "
            f"with -n 8 added (the same command extends its run), then `t2i-audit probe {root} --early` again")
