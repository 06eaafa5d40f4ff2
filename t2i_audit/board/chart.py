"""The chart the board page opens with: every model of a group at a glance, ranked, with its success and 95% CI
overall and per category. One inline SVG per group (no script, no CDN: the page opens offline), drawn with the
report's colour scale; every text passes ``escape``.

Rows follow the group's overall rank (best first); one panel per column (overall, then each category) on a
0–100 % axis; a dot at the rate, a line over its Wilson CI; a column with no verdicts for a run shows "—".
"""

from __future__ import annotations

import math

from markupsafe import Markup, escape

from ..report.charts import rate_colour

ROW = 22          # px per model
LABEL_W = 230     # px for the model names
PANEL_W = 150     # px per column
GAP = 30          # px between panels: room for the axis labels of both
TOP = 34          # panel titles and the axis labels


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _short(text: str, n: int = 34) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def rank_chart(rows: list[dict], categories: list[str]) -> Markup:
    """``rows``: the group's rows in rank order (each ``label``, ``study``, ``overall`` and ``cats`` in the order of
    ``categories``: cells with ``n``, ``rate``, ``lo``, ``hi``)."""
    cols = ["overall", *categories]
    width = LABEL_W + len(cols) * (PANEL_W + GAP)
    height = TOP + ROW * len(rows) + 8
    out = [f'<svg class="rankchart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="success with 95% CI per model, overall and per category">']
    for j, col in enumerate(cols):
        x0 = LABEL_W + j * (PANEL_W + GAP)
        out.append(f'<text x="{x0 + PANEL_W / 2:.0f}" y="12" text-anchor="middle" font-size="12" font-weight="600">'
                   f'{escape(_short(str(col), 22))}</text>')
        for tick, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
            x = x0 + tick * PANEL_W
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 8}" y2="{height - 4}" stroke="#ddd"/>'
                       f'<text x="{x:.1f}" y="{TOP - 11}" text-anchor="{anchor}" font-size="10" fill="#888">'
                       f'{int(tick * 100)}%</text>')
    for i, r in enumerate(rows):
        y = TOP + ROW * i + ROW / 2
        name = r["label"] + (f" · study {r['study']}" if r.get("study") else "")
        out.append(f'<text x="{LABEL_W - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="12">'
                   f'<title>{escape(name)}</title>{escape(_short(name))}</text>')
        for j, c in enumerate([r["overall"], *r["cats"]]):
            x0 = LABEL_W + j * (PANEL_W + GAP)
            if not c.get("n") or not _finite(c.get("rate")):
                out.append(f'<text x="{x0 + PANEL_W / 2:.0f}" y="{y + 4:.1f}" text-anchor="middle" '
                           f'fill="#999">—</text>')
                continue
            lo, hi, rate = c["lo"], c["hi"], c["rate"]
            fill, _ = rate_colour(rate)
            out.append(f'<g><title>{escape(r["label"])} · {escape(str(cols[j]))}: {rate:.1%} '
                       f'[{lo:.1%}, {hi:.1%}] of {int(c["n"])} images</title>'
                       f'<line x1="{x0 + lo * PANEL_W:.1f}" x2="{x0 + hi * PANEL_W:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                       f'stroke="#333" stroke-width="2"/><circle cx="{x0 + rate * PANEL_W:.1f}" cy="{y:.1f}" r="4.5" '
                       f'fill="{fill}" stroke="#333"/></g>')
    out.append("</svg>")
    return Markup("".join(out))
