"""Inline SVG charts and the colour scale. Every text that goes into SVG passes ``escape``;
the result is ``Markup`` so jinja2's autoescape leaves the (already safe) SVG alone."""

from __future__ import annotations

import math
from typing import Sequence

from markupsafe import Markup, escape

# RdBu-like diverging scale (colour-blind safe): 0% dark red → 50% near white → 100% dark blue
_STOPS = [(0.0, (178, 24, 43)), (0.25, (239, 138, 98)), (0.5, (247, 247, 247)),
          (0.75, (103, 169, 207)), (1.0, (33, 102, 172))]
# Okabe–Ito categorical palette
PALETTE = ["#E69F00", "#56B4E9", "#009E73", "#D55E00", "#CC79A7", "#0072B2", "#F0E442",
           "#999999", "#000000"]
FAILURE_ORDER = ["missing_object", "wrong_attribute", "swapped_binding", "attribute_leakage",
                 "reversed_relation", "wrong_relation", "wrong_count"]


def failure_colour(t: str) -> str:
    if t in FAILURE_ORDER:
        return PALETTE[FAILURE_ORDER.index(t)]
    return PALETTE[7]


def rate_colour(rate: float | None) -> tuple[str, str]:
    """(background, text colour) for a rate in [0, 1]; grey for no data."""
    if rate is None or (isinstance(rate, float) and math.isnan(rate)):
        return "#e9e9ee", "#888"
    r = min(1.0, max(0.0, float(rate)))
    for (a, ca), (b, cb) in zip(_STOPS, _STOPS[1:]):
        if r <= b:
            t = (r - a) / (b - a) if b > a else 0
            rgb = tuple(round(x + (y - x) * t) for x, y in zip(ca, cb))
            break
    lum = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]
    return "#%02x%02x%02x" % rgb, ("#111" if lum > 140 else "#fff")


def legend_gradient() -> str:
    return "linear-gradient(90deg, " + ", ".join(
        f"rgb{c} {int(p * 100)}%" for p, c in _STOPS) + ")"


def ci_bar(rate: float, lo: float, hi: float, width: int = 160) -> Markup:
    """A small interval plot on a 0–100% axis."""
    if rate is None or math.isnan(rate):
        return Markup('<span class="muted">—</span>')
    from ..analysis import rate_text  # the one text of a rate and its CI, read out as shown

    x = lambda v: 4 + v * (width - 8)  # noqa: E731
    bg, _ = rate_colour(rate)
    return Markup(
        f'<svg class="ci" width="{width}" height="14" viewBox="0 0 {width} 14" role="img" '
        f'aria-label="{rate_text(rate, lo, hi)}">'
        f'<line x1="4" x2="{width - 4}" y1="7" y2="7" class="axis"/>'
        f'<line x1="{x(0.5):.1f}" x2="{x(0.5):.1f}" y1="2" y2="12" class="tick"/>'
        f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="7" y2="7" class="whisker"/>'
        f'<circle cx="{x(rate):.1f}" cy="7" r="4.2" fill="{bg}" class="dot"/></svg>')


def stacked_bar(segments: Sequence[tuple[str, float]], width: int = 420) -> Markup:
    """100% stacked bar of (label, count) segments, coloured by failure type."""
    total = sum(c for _, c in segments) or 1
    out, x = [f'<svg class="stack" width="{width}" height="18" viewBox="0 0 {width} 18">'], 0.0
    for label, c in segments:
        w = width * c / total
        out.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="18" '
                   f'fill="{failure_colour(label)}"><title>{escape(label)}: {int(c)} '
                   f'({c / total:.0%})</title></rect>')
        x += w
    out.append("</svg>")
    return Markup("".join(out))


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    step = (hi - lo) / (n - 1)
    return [lo + i * step for i in range(n)]


def line_chart(xs: Sequence, series: list[dict], *, y_range=(0.0, 1.0), width=520, height=240,
               y_label="", x_label="layer", refs: Sequence[tuple[float, str]] = ()) -> Markup:
    """Lines over categorical/numeric x. ``series``: {label, ys, colour, dash?, band?: (lo, hi)}."""
    ml, mr, mt, mb = 44, 12, 10, 34
    pw, ph = width - ml - mr, height - mt - mb
    y0, y1 = y_range
    n = max(1, len(xs) - 1)
    X = lambda i: ml + pw * i / n  # noqa: E731
    Y = lambda v: mt + ph * (1 - (min(max(v, y0), y1) - y0) / ((y1 - y0) or 1))  # noqa: E731
    o = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
         f'role="img" aria-label="{escape(y_label)} by {escape(x_label)}">']
    for t in _ticks(y0, y1):
        o.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" class="grid"/>'
                 f'<text x="{ml - 6}" y="{Y(t) + 4:.1f}" class="tl" text-anchor="end">{t:.2f}</text>')
    every = max(1, math.ceil(len(xs) / 12))
    for i, xv in enumerate(xs):
        if i % every == 0 or i == len(xs) - 1:
            o.append(f'<text x="{X(i):.1f}" y="{mt + ph + 14}" class="tl" text-anchor="middle">'
                     f'{escape(str(xv))}</text>')
    o.append(f'<text x="{ml + pw / 2}" y="{height - 4}" class="al" text-anchor="middle">'
             f'{escape(x_label)}</text>')
    for v, label in refs:
        o.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" class="ref"/>'
                 f'<text x="{ml + pw - 2}" y="{Y(v) - 3:.1f}" class="tl" text-anchor="end">'
                 f'{escape(label)}</text>')
    for s in series:
        pts = [(X(i), Y(v)) for i, v in enumerate(s["ys"]) if v is not None and not math.isnan(v)]
        band = s.get("band")
        if band:
            lo = [(X(i), Y(v)) for i, v in enumerate(band[0]) if v is not None]
            hi = [(X(i), Y(v)) for i, v in enumerate(band[1]) if v is not None]
            if lo and hi:
                poly = " ".join(f"{a:.1f},{b:.1f}" for a, b in hi + lo[::-1])
                o.append(f'<polygon points="{poly}" fill="{s["colour"]}" opacity="0.16"/>')
        if pts:
            dash = ' stroke-dasharray="5 4"' if s.get("dash") else ""
            o.append(f'<polyline points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" '
                     f'fill="none" stroke="{s["colour"]}" stroke-width="2"{dash}>'
                     f'<title>{escape(s["label"])}</title></polyline>')
            if not s.get("dash"):
                for (a, b), v in zip(pts, [v for v in s["ys"] if v is not None]):
                    o.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.6" fill="{s["colour"]}">'
                             f'<title>{escape(s["label"])}: {v:.3f}</title></circle>')
    o.append("</svg>")
    return Markup("".join(o))


def scatter(points: Sequence[dict], *, width=360, height=260, x_label="x", y_label="y") -> Markup:
    ml, mr, mt, mb = 44, 12, 10, 34
    pw, ph = width - ml - mr, height - mt - mb
    xs = [float(p["x"]) for p in points if p.get("x") is not None and p.get("y") is not None]
    ys = [float(p["y"]) for p in points if p.get("x") is not None and p.get("y") is not None]
    if not xs:
        return Markup('<p class="muted">no points</p>')
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    pad = lambda a, b: ((a - 0.05, b + 0.05) if a == b else (a - (b - a) * 0.05, b + (b - a) * 0.05))  # noqa
    (x0, x1), (y0, y1) = pad(x0, x1), pad(y0, y1)
    X = lambda v: ml + pw * (v - x0) / (x1 - x0)  # noqa: E731
    Y = lambda v: mt + ph * (1 - (v - y0) / (y1 - y0))  # noqa: E731
    o = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
         f'role="img" aria-label="{escape(y_label)} against {escape(x_label)}">']
    for t in _ticks(y0, y1, 4):
        o.append(f'<line x1="{ml}" x2="{ml + pw}" y1="{Y(t):.1f}" y2="{Y(t):.1f}" class="grid"/>'
                 f'<text x="{ml - 6}" y="{Y(t) + 4:.1f}" class="tl" text-anchor="end">{t:.2f}</text>')
    for t in _ticks(x0, x1, 4):
        o.append(f'<text x="{X(t):.1f}" y="{mt + ph + 14}" class="tl" text-anchor="middle">{t:.2f}</text>')
    o.append(f'<text x="{ml + pw / 2}" y="{height - 4}" class="al" text-anchor="middle">{escape(x_label)}</text>'
             f'<text x="12" y="{mt + ph / 2}" class="al" text-anchor="middle" '
             f'transform="rotate(-90 12 {mt + ph / 2})">{escape(y_label)}</text>')
    for p in points:
        if p.get("x") is None or p.get("y") is None:
            continue
        o.append(f'<circle cx="{X(float(p["x"])):.1f}" cy="{Y(float(p["y"])):.1f}" r="3.4" class="pt">'
                 f'<title>{escape(str(p.get("composition", "")))}: ({float(p["x"]):.3f}, '
                 f'{float(p["y"]):.3f})</title></circle>')
    o.append("</svg>")
    return Markup("".join(o))


def diff_bar(diff: float, lo: float, hi: float, span: float = 0.5, width: int = 150,
             significant: bool = False) -> Markup:
    """A paired difference with its CI on a −span…+span axis (clipped), zero marked."""
    if diff is None or math.isnan(diff):
        return Markup('<span class="muted">—</span>')
    x = lambda v: 4 + (min(max(v, -span), span) + span) / (2 * span) * (width - 8)  # noqa: E731
    colour = "#2166ac" if diff > 0 else ("#b2182b" if diff < 0 else "#6b7080")
    fill = colour if significant else "#fff"
    return Markup(
        f'<svg class="ci" width="{width}" height="14" viewBox="0 0 {width} 14" role="img" '
        f'aria-label="{diff:+.1%} [{lo:+.1%}, {hi:+.1%}]">'
        f'<line x1="4" x2="{width - 4}" y1="7" y2="7" class="axis"/>'
        f'<line x1="{x(0):.1f}" x2="{x(0):.1f}" y1="1" y2="13" class="tick"/>'
        f'<line x1="{x(lo):.1f}" x2="{x(hi):.1f}" y1="7" y2="7" stroke="{colour}" stroke-width="2.2"/>'
        f'<circle cx="{x(diff):.1f}" cy="7" r="4.2" fill="{fill}" stroke="{colour}" stroke-width="1.6"/></svg>')
