"""The published mini track (reports/track/) as a person opens it: headless Chromium, offline, no console
error, no request. Skipped without a Chromium binary (tests/report/test_browser.py has the helpers)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[1] / "report"
sys.path.insert(0, str(REPORT))

from test_browser import CHROMIUM, chromium  # noqa: E402

PAGES = ("index.html", "cov050/index.html", "cov100/index.html")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary (apt-get install chromium)")


@pytest.mark.parametrize("page", PAGES)
def test_published_track_pages_render_offline(repo_root, tmp_path, page):
    path = repo_root / "reports" / "track" / page
    res = chromium(path.as_uri(), tmp_path / "c", "--dump-dom")
    assert res["rc"] == 0 and res["console"] == [] and res["requests"] == []
    dom = res["stdout"]
    assert "<svg" in dom and "Composition over training" in dom
    if page != "index.html":
        assert "Decodability of the constituents" in dom and "held-out" in dom
