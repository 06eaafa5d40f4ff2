"""The pages as a person sees them, in headless Chromium (Debian package ``chromium``).

Skipped when no Chromium binary exists. Console messages come from ``--enable-logging``;
network requests from ``--log-net-log`` (requests whose network isolation key is the file://
page, so Chromium's own background traffic is not counted). Screenshots land in the test's
tmp dir, or in $T2I_AUDIT_SCREENSHOTS when set.
"""

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from synth import make_prompts, make_run

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHROMIUM = os.environ.get("T2I_AUDIT_CHROMIUM") or next((shutil.which(c) for c in CANDIDATES if shutil.which(c)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary (install Debian's `chromium` package: apt-get install chromium)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--enable-logging=stderr", "--v=0",
         "--virtual-time-budget=3000"]


def chromium(url: str, tmp: Path, *extra: str) -> dict:
    tmp.mkdir(parents=True, exist_ok=True)
    net = tmp / "net.json"
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}", f"--log-net-log={net}", *extra, url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    console = [l for l in r.stderr.splitlines() if ":CONSOLE" in l]
    requests = []
    if net.exists():
        log = json.loads(net.read_text() or "{}")
        start = log.get("constants", {}).get("logEventTypes", {}).get("URL_REQUEST_START_JOB")
        for e in log.get("events", []):
            p = e.get("params", {})
            if e.get("type") == start and str(p.get("network_isolation_key", "")).startswith("file://"):
                if not p.get("url", "").startswith(("file:", "data:")):
                    requests.append(p["url"])
    return {"rc": r.returncode, "stdout": r.stdout, "console": console, "requests": requests}


class Cards(HTMLParser):
    def __init__(self):
        super().__init__()
        self.cards, self.body = [], {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "article" and "card" in (a.get("class") or ""):
            self.cards.append(a)
        if tag == "body":
            self.body = a


def parse(dom: str) -> Cards:
    p = Cards()
    p.feed(dom)
    return p


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from t2i_audit.report import render_report

    run = make_run(tmp_path_factory.mktemp("b") / "run", prompts=make_prompts(n_binding=16, n_rel=8, n_count=6))
    return render_report(run, progress=False)


def test_detectors_catch_errors_and_requests(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><img src="https://example.invalid/x.png">'
                   "<script>console.error('boom'); missingFn();</script></body></html>")
    res = chromium(bad.as_uri(), tmp_path / "c", "--dump-dom")
    assert any("boom" in l for l in res["console"]) and any("missingFn" in l for l in res["console"])
    assert res["requests"] == ["https://example.invalid/x.png"]


def test_report_loads_offline_without_errors_or_requests(page, tmp_path):
    res = chromium(page.as_uri(), tmp_path / "c", "--dump-dom")
    assert res["rc"] == 0
    assert res["console"] == []
    assert res["requests"] == []
    p = parse(res["stdout"])
    assert len(p.cards) > 0 and p.body.get("data-shown") == str(len(p.cards))
    assert not any("hidden" in c for c in p.cards)


def test_gallery_filter_via_url_hash(page, tmp_path):
    html = page.read_text()
    total = html.count('<article class="card"')
    res = chromium(page.as_uri() + "#category=counting", tmp_path / "c1", "--dump-dom")
    p = parse(res["stdout"])
    visible = [c for c in p.cards if "hidden" not in c]
    assert visible and all(c["data-category"] == "counting" for c in visible)
    assert len(visible) == sum(c["data-category"] == "counting" for c in p.cards) < total
    assert p.body["data-shown"] == str(len(visible))
    assert res["console"] == []
    # failure type and concept filters combine
    res = chromium(page.as_uri() + "#failure=swapped_binding&concept=red", tmp_path / "c2", "--dump-dom")
    p = parse(res["stdout"])
    visible = [c for c in p.cards if "hidden" not in c]
    expected = [c for c in p.cards if "|swapped_binding|" in c["data-failures"] and "|red|" in c["data-concepts"]]
    assert len(visible) == len(expected)
    assert all("|swapped_binding|" in c["data-failures"] and "|red|" in c["data-concepts"] for c in visible)
    # an unknown value falls back to showing everything, not to an empty page
    res = chromium(page.as_uri() + "#category=nope", tmp_path / "c3", "--dump-dom")
    assert parse(res["stdout"]).body["data-shown"] == str(total)


def _screenshot(url: str, tmp: Path, name: str, height: int) -> Path:
    from PIL import Image, ImageStat

    shot = tmp / name
    res = chromium(url, tmp / "s", "--window-size=1300,%d" % height, f"--screenshot={shot}")
    assert res["console"] == [] and res["requests"] == []
    with Image.open(shot) as im:
        assert im.size == (1300, height)
        assert max(ImageStat.Stat(im.convert("L")).stddev) > 10  # not a blank page
    if os.environ.get("T2I_AUDIT_SCREENSHOTS"):
        dest = Path(os.environ["T2I_AUDIT_SCREENSHOTS"])
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, dest / name)
    return shot


def test_screenshots_report_and_compare(page, tmp_path):
    from t2i_audit.report import compare_runs

    _screenshot(page.as_uri(), tmp_path, "report.png", 2400)
    run_dir = page.parent.parent
    other = make_run(tmp_path / "other", prompts=[json.loads(l) for l in (run_dir / "prompts.jsonl").read_text().splitlines()],
                     skill=0.6, model="tiny-other", probes=False)
    cmp = compare_runs([run_dir, other], tmp_path / "cmp")
    _screenshot(cmp.as_uri(), tmp_path, "compare.png", 1600)


class SortableTables(HTMLParser):
    """Per sortable table (data-group): its column keys, the row order (data-run) and each cell's data-v."""

    def __init__(self):
        super().__init__()
        self.tables, self.body, self._t, self._row = {}, {}, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if tag == "table" and "sortable" in (a.get("class") or ""):
            self._t = self.tables.setdefault(a["data-group"], {"keys": [], "rows": [], "sorted": a.get("data-sorted")})
        elif self._t is not None and tag == "th":
            self._t["keys"].append(a.get("data-key"))
        elif self._t is not None and tag == "tr" and "data-run" in a:
            self._row = {"run": a["data-run"], "v": []}
            self._t["rows"].append(self._row)
        elif self._row is not None and tag == "td":
            self._row["v"].append(a.get("data-v"))

    def handle_endtag(self, tag):
        if tag == "table":
            self._t = self._row = None


def _tables(dom: str) -> SortableTables:
    p = SortableTables()
    p.feed(dom)
    return p


@pytest.fixture(scope="module")
def board_page(tmp_path_factory):
    from t2i_audit.board import build_board
    from t2i_audit.report import render_report

    base = tmp_path_factory.mktemp("board")
    prompts = make_prompts(n_binding=12, n_rel=6, n_count=6)
    cfg = {"steps": 20, "guidance": 7.0, "size": 48, "dtype": "float32"}
    runs = []
    for name, skill, over in (("a", 1.0, {}), ("b", 0.45, {}), ("c", 0.75, {}), ("d", 0.9, {"guidance": 3.0})):
        runs.append(make_run(base / name, prompts=prompts, skill=skill, model=f"model-{name}", probes=False,
                             config={**cfg, **over}))
        render_report(runs[-1], progress=False)
    # strict settings: guidance 3 sets "d" apart, so the page has two groups (a leaderboard would rank it in G1)
    return build_board(base / "board", runs, strict_settings=True).page


def test_board_page_loads_offline_and_sorts_by_category_and_failure_type(board_page, tmp_path):
    res = chromium(board_page.as_uri(), tmp_path / "c0", "--dump-dom")
    assert res["rc"] == 0 and res["console"] == [] and res["requests"] == []
    default = _tables(res["stdout"]).tables
    # each group's ranking, and its failure types in a table of their own under it (side by side they scrolled)
    assert set(default) == {"G1", "G2", "G1-failures", "G2-failures"}
    g1 = default["G1"]
    assert [r["run"] for r in g1["rows"]][0] == "a"  # rank order first
    failure_keys = [k for k in default["G1-failures"]["keys"] if k and k.startswith("f:")]
    assert failure_keys and "c:counting" in g1["keys"]
    for key, table in (("c:counting", "G1"), (failure_keys[0], "G1-failures")):
        res = chromium(board_page.as_uri() + "#sort=" + key, tmp_path / key.replace(":", "-"), "--dump-dom")
        assert res["console"] == []
        p = _tables(res["stdout"])
        assert p.body.get("data-sort") == key
        t = p.tables[table]
        col = t["keys"].index(key)
        values = [float(r["v"][col]) for r in t["rows"]]
        assert values == sorted(values, reverse=True) and t["sorted"] == key
    # by the first failure type the weakest run leads: another order than the rank's
    assert [r["run"] for r in t["rows"]][0] == "b"


def test_board_page_gallery_filters_and_links(board_page, tmp_path):
    html = board_page.read_text()
    assert 'href="../a/report/index.html"' in html  # each run's own report
    res = chromium(board_page.as_uri() + "#category=counting", tmp_path / "f", "--dump-dom")
    cards = parse(res["stdout"]).cards
    visible = [c for c in cards if "hidden" not in c]
    assert visible and all(c["data-category"] == "counting" for c in visible) and len(visible) < len(cards)
    _screenshot(board_page.as_uri(), tmp_path, "board.png", 2200)
