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
