"""A command that computes numbers ends with them on the terminal, as a small aligned table (as
lm-evaluation-harness prints its results), not only with the paths of the files that hold them. Each table is
read from the summary the command has just written (``compare.json``, ``curves.json``), so what the terminal says
is what the page and the tables say. Plain text: it goes through ``typer.echo`` (printable), no rich markup.
"""

from __future__ import annotations

from typing import Optional, Sequence


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> list[str]:
    """Columns padded to their widest cell (``right``: the column indices aligned right, numbers)."""
    cells = [list(map(str, header))] + [list(map(str, r)) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = []
    for r in cells:
        out.append("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                   .rstrip())
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


def pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1%}"


def rate_ci(rate: Optional[float], lo: Optional[float], hi: Optional[float]) -> str:
    """A rate with its CI as the pages show it (analysis.rate_text, the one formatter); ``-`` for no rate."""
    if rate is None:
        return "-"
    if lo is None or hi is None:
        return pct(rate)
    from .analysis import rate_text

    return rate_text(rate, lo, hi)


def run_headline(run) -> Optional[str]:
    """The report's headline as one line (RUN/summary.json), what ``run`` and ``report`` end with; None before a
    report exists."""
    try:
        from .errors import AuditError
        from .report.headline import headline_text
        from .safeload import read_json

        summary = read_json(run.summary) if run.summary.exists() else {}
    except (ModuleNotFoundError, AuditError):  # no report stage installed, or a damaged summary (verify names it)
        return None
    return headline_text(summary.get("report") if isinstance(summary, dict) else None)


def compare_lines(summary: dict) -> list[str]:
    """``compare``'s ranking (success with its CI, images, significant wins/losses) and success per category."""
    rank = table(["rank", "model", "success [95% CI]", "images", "wins", "losses"],
                 [[r.get("rank", "-"), r["model"], rate_ci(r.get("rate"), r.get("lo"), r.get("hi")), r.get("n", "-"),
                   r.get("wins", "-"), r.get("losses", "-")] for r in summary.get("ranking") or []],
                 right=(0, 3, 4, 5))
    models = list(summary.get("models") or [])
    cats = summary.get("category_rates") or {}
    lines = [f"{summary.get('paired_images', 0)} paired images on {summary.get('shared_prompts', 0)} shared prompts; "
             f"differences tested with {summary.get('correction', 'holm')} correction "
             f"at alpha {summary.get('alpha', 0.05)}", *rank]
    if cats and models:
        rows = [[c, *(_cell(cats[c].get(m)) for m in models)] for c in sorted(cats)]
        lines += ["", *table(["category", *models], rows, right=tuple(range(1, len(models) + 1)))]
    return lines


def _cell(r: Optional[dict]) -> str:
    return "-" if not r or r.get("rate") is None else f"{pct(r['rate'])} of {r.get('n', '?')}"


def track_lines(summary: dict) -> list[str]:
    """``track``'s curve: success (all prompts, held-out prompts) and the headline decodability per checkpoint, then
    the step where held-out success first exceeds chance."""
    head = summary.get("headline_source")
    rows = []
    for c in summary.get("checkpoints") or []:
        succ = {r["split"]: r for r in c.get("success") or [] if r.get("category") == "all"}
        dec = next((r for r in c.get("decodability") or []
                    if r.get("source") == head and r.get("target") == "all" and r.get("split") == "heldout"), None)
        rows.append([c["label"], "-" if c.get("step") is None else c["step"],
                     *(_split(succ.get(s)) for s in ("all", "heldout")),
                     "-" if dec is None else rate_ci(dec.get("p_true"), *(dec.get("ci") or (None, None)))])
    lines = table(["checkpoint", "step", "success", "held-out success", "decodability (held-out)"], rows, right=(1,))
    cr = summary.get("crossing")
    if cr:
        where = (f"step {cr['step']}" if cr.get("step") is not None else "no checkpoint yet")
        lines.append(f"held-out success first above chance ({pct(cr.get('chance'))}, "
                     f"{summary.get('chance_from', '')}): {where}")
    return lines


def _split(r: Optional[dict]) -> str:
    if not r:
        return "-"
    lo, hi = (r.get("ci") or (None, None))[:2]
    return f"{rate_ci(r.get('rate'), lo, hi)} of {r.get('n', '?')}"
