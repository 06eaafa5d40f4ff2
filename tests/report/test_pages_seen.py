"""Every page kind as a person sees it (issue 42 point 4): in headless Chromium at 1,280 and 2,000 CSS px wide, no
text is overlapped by other text or a picture, no text is cut off, and every table fits its container — readable
without sideways scrolling. The check is layout_check.js, run in the page (cdp.py); one browser for the module,
both widths on each page's one load."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from allpages import KINDS
from cdp import WIDTHS, Browser, needs_chromium

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(Path(tempfile.mkdtemp(dir=tmp_path_factory.mktemp("chromium"))))
    yield b
    b.close()


def test_the_check_finds_an_overlap_a_cut_and_a_wide_table(browser, tmp_path):
    """The faults of issue 42 in a page of their own: a badge narrower than its word, text cut by overflow:hidden,
    a table wider than its scroll container. Each is named; the same page without them passes."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<html><body style="margin:0;font:15px sans-serif">'
        '<ul><li><span id="badge" style="display:inline-flex;width:16px">skipped</span> Is the cube red?</li></ul>'
        '<p style="width:60px;overflow:hidden;white-space:nowrap">a sentence much longer than sixty pixels</p>'
        '<div style="width:300px;overflow-x:auto"><table><tr>' + "<td>column&nbsp;of&nbsp;text</td>" * 8 +
        "</tr></table></div></body></html>")
    browser.load(bad.as_uri())
    found = browser.layout_problems(1280)
    assert any(p.startswith("overlap:") and '"skipped"' in p and "Is the cube red?" in p for p in found), found
    assert any(p.startswith("clipped:") and "a sentence much longer" in p for p in found), found
    assert any(p.startswith("clipped: div > table") and "scrolls sideways" in p for p in found), found
    good = tmp_path / "good.html"
    good.write_text('<html><body><ul><li><span style="display:inline-flex">skipped</span> Is the cube red?</li></ul>'
                    "<table><tr><td>a</td><td>b</td></tr></table></body></html>")
    browser.load(good.as_uri())
    assert browser.layout_problems(1280) == []


@pytest.mark.parametrize("kind", KINDS)
def test_page_reads_at_laptop_and_wide_screen_widths(all_pages, browser, kind):
    browser.load(all_pages[kind].as_uri())
    found = {w: browser.layout_problems(w) for w in WIDTHS}
    assert found == {w: [] for w in WIDTHS}, "\n".join(f"{w} px: {p}" for w, ps in found.items() for p in ps)
    assert browser.problems() == []  # no console error, no request leaving the page's folder
