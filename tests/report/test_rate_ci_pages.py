"""One CI of a rate on every page (issue 42 point 4): the same k of n images reads the same on the run report, the
compare page, the board page and card, the track page and the board's terminal lines — the 95 % Wilson interval
(analysis.wilson) through one formatter (analysis.ci_text). Before, 0 of 8 images read "0 %–0 %" on the track page
(a bootstrap of all-failures has no spread) and "0.0 % [0.0 %, 32.4 %]" on the board."""

from __future__ import annotations

import re

from allpages import CONFIG, synthetic_track
from synth import make_prompts, make_run

from t2i_audit.analysis import ci_text, rate_text, wilson

# 12 images: at least stats.MIN_RATE_N, so every page shows the rate rather than "too few"
N = 12


def _texts(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_zero_of_n_reads_the_same_on_every_page(tmp_path):
    from t2i_audit.board import build_board
    from t2i_audit.board.cli import _printed
    from t2i_audit.report import compare_runs, render_report
    from t2i_audit.track.page import write_track_page

    prompts = [p for p in make_prompts(n_binding=N // 2) if p["category"] == "color_binding"]  # 2 images each
    assert len(prompts) == N // 2
    zero = make_run(tmp_path / "zero", prompts=prompts, skill=0.0, black=0, probes=False, config=CONFIG)
    good = make_run(tmp_path / "good", prompts=prompts, skill=1.0, black=0, probes=False, config=CONFIG)
    _, lo, hi = wilson(0, N)
    want = ci_text(lo, hi)
    assert want == "[0.0%, 24.2%]"  # no other k of n on these pages has this interval

    pages = {"report": render_report(zero, progress=False), "compare": compare_runs([zero, good], tmp_path / "cmp")}
    render_report(good, progress=False)
    board = build_board(tmp_path / "board", [zero, good])
    pages["board"] = board.page
    track = synthetic_track(tmp_path / "track", prompts, tmp_path / "training",
                            points=(("base", 0, 0.0), ("final", None, 1.0)), samples=2)
    write_track_page(track, folds=2)
    pages["track"] = track / "index.html"
    for kind, page in pages.items():
        text = _texts(page.read_text())
        assert want in text, (kind, re.findall(r"\[[0-9.]+%, [0-9.]+%\]|\d+%–\d+%", text)[:6])
        assert not re.search(r"\b0(\.0)?\s?%\s?[–-]\s?0(\.0)?\s?%", text), kind  # no degenerate "0 %–0 %"
    assert f"{rate_text(0.0, lo, hi)} |" in (tmp_path / "board" / "README.md").read_text()  # the card's table
    assert any(f"{rate_text(0.0, lo, hi)} of {N} images" in line for line in _printed(board, quiet=False))
