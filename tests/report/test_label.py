"""``t2i-audit label``: stratified sampling, the page, and a person's session in headless Chromium.

The browser is driven through the Chrome DevTools Protocol over ``--remote-debugging-pipe``
(fd 3 in, fd 4 out, NUL-terminated JSON; no extra Python package): real key presses
(``Input.dispatchKeyEvent``), a reload to check the autosave, and a click on "Export CSV" with
downloads allowed (``Browser.setDownloadBehavior``). Browser tests skip without Chromium, as in
test_browser.py. Every wait waits for the condition it checks (the new document's own state, the
download's "completed" event), never for a time or a proxy, so a loaded machine only makes it slower.
"""

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from synth import make_prompts, make_run

from t2i_audit.cli import app
from t2i_audit.errors import AuditError
from t2i_audit.report.label import SHEET_COLUMNS, allocate, render_label_page, stratified_sample
from t2i_audit.rundir import RunDir, read_jsonl
from t2i_audit.scorers.calibrate import export_sheet

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHROMIUM = os.environ.get("T2I_AUDIT_CHROMIUM") or next((shutil.which(c) for c in CANDIDATES if shutil.which(c)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary (apt-get install chromium)")
EVIL = 'a red cube </script><script>document.title="pwned"</script> & a "blue" sphere'


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    prompts = make_prompts(n_binding=8, n_rel=4, n_count=3)
    prompts[0]["text"] = EVIL  # prompt texts come from users' files: must stay text on the page
    return make_run(tmp_path_factory.mktemp("label") / "run", prompts=prompts)


def test_allocate_is_proportional_with_a_floor():
    assert allocate(10, {"a": 50, "b": 30, "c": 2}) == {"a": 6, "b": 3, "c": 1}
    assert allocate(2, {"a": 5, "b": 9, "c": 1}) == {"a": 1, "b": 1, "c": 0}
    assert allocate(100, {"a": 5, "b": 9}) == {"a": 5, "b": 9}
    assert allocate(5, {"a": 1, "b": 1, "c": 10}) == {"a": 1, "b": 1, "c": 3}
    assert allocate(7, {"a": 2, "b": 40}) == {"a": 1, "b": 6}


def test_stratified_sample_is_seeded_and_skips_flagged(run):
    rd = RunDir(run)
    prompts = {p["id"]: p for p in rd.read_prompts()}
    images = rd.read_images()
    flagged = {(i["prompt_id"], i["sample"]) for i in images if i["flags"]}
    assert flagged  # synth flags the first image
    a = stratified_sample(images, prompts, 9, seed=0)
    assert a == stratified_sample(images, prompts, 9, seed=0)
    assert a != stratified_sample(images, prompts, 9, seed=1)
    assert not {(i["prompt_id"], i["sample"]) for i in a} & flagged
    cats = pd.Series([prompts[i["prompt_id"]]["category"] for i in a]).value_counts().to_dict()
    sizes = pd.Series([prompts[i["prompt_id"]]["category"] for i in images if not i["flags"]]).value_counts().to_dict()
    assert cats == {c: k for c, k in allocate(9, sizes).items() if k}


def test_sheet_columns_are_calibrates(run, tmp_path):
    export_sheet(run, tmp_path / "sheet.csv")
    assert list(pd.read_csv(tmp_path / "sheet.csv").columns) == SHEET_COLUMNS


def test_page_is_self_contained_and_escaped(run, tmp_path):
    page = render_label_page(run, n=6, seed=0, out=tmp_path / "label.html", progress=False)
    html = page.read_text()
    assert html.count("data:image/png;base64,") == 6
    assert "http://" not in html and "https://" not in html and "<link" not in html
    assert "</script><script>document.title" not in html  # tojson escapes < > & in the data block


def test_label_cli_and_errors(run, tmp_path):
    out = tmp_path / "p.html"
    r = CliRunner().invoke(app, ["label", str(run), "--n", "4", "--seed", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert out.exists() and r.output.strip().endswith("p.html")
    r = CliRunner().invoke(app, ["label", str(tmp_path / "missing")])
    assert isinstance(r.exception, AuditError) and "run directory not found" in str(r.exception)
    r = CliRunner().invoke(app, ["label", str(run), "--n", "0"])
    assert isinstance(r.exception, AuditError) and "--n must be positive" in str(r.exception)


# --- headless Chromium ---------------------------------------------------------------------

HANG = 300  # seconds: only a hung browser ever waits this long; every wait ends on its condition
KEYCODES = {"ArrowRight": 39, "ArrowLeft": 37, "ArrowDown": 40, "ArrowUp": 38, "Backspace": 8}


class Browser:
    """One headless Chromium page driven over the DevTools pipe."""

    def __init__(self, profile: Path):
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()

        def fds():  # dup2 from other numbers onto 3/4 clears close-on-exec
            a, b = os.dup(r_in), os.dup(w_out)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", "--disable-default-apps", f"--user-data-dir={profile}",
             "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(r_in)
        os.close(w_out)
        self.w, self.r = os.fdopen(w_in, "wb", buffering=0), os.fdopen(r_out, "rb", buffering=0)
        self.buf, self.n, self.events = b"", 0, []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.send(f"{domain}.enable", page=True)

    def _message(self, deadline: float) -> dict:
        """The next message from Chromium; TimeoutError past ``deadline`` (a hang guard, not a wait)."""
        while b"\0" not in self.buf:
            if not select.select([self.r], [], [], max(0.0, deadline - time.time()))[0]:
                raise TimeoutError("no message from Chromium")
            chunk = self.r.read(1 << 16)
            if not chunk:
                raise RuntimeError("Chromium exited: " + self.proc.stderr.read().decode()[-2000:])
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, page: bool = False) -> dict:
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if page:
            msg["sessionId"] = self.session
        self.w.write(json.dumps(msg).encode() + b"\0")
        deadline = time.time() + HANG
        while True:
            m = self._message(deadline)
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            self.events.append(m)

    def event(self, method: str, match=lambda params: True) -> dict:
        """The params of the first ``method`` event (already received or to come) that ``match`` accepts."""
        seen = 0
        deadline = time.time() + HANG
        while True:
            for e in self.events[seen:]:
                if e.get("method") == method and match(e.get("params", {})):
                    return e["params"]
            seen = len(self.events)
            self.events.append(self._message(deadline))

    def eval(self, expr: str):
        res = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, page=True)
        if "exceptionDetails" in res:
            raise RuntimeError(res["exceptionDetails"])
        return res["result"].get("value")

    def load(self, url: str) -> None:
        """Navigate and return once the NEW document has run its script (the old one, still answering
        until the navigation commits, is marked so that it is never taken for the new one)."""
        self.eval("window.__replaced = true")
        self.send("Page.navigate", {"url": url}, page=True)
        ready = ("window.__replaced === undefined && document.readyState === 'complete' "
                 "&& typeof window.labelState === 'function'")
        deadline = time.time() + HANG
        while not self._eval_or_none(ready):
            if time.time() > deadline:
                raise TimeoutError(url)
            time.sleep(0.02)  # polls the condition itself

    def _eval_or_none(self, expr: str):
        try:
            return self.eval(expr)
        except RuntimeError:  # the context was destroyed by the navigation between two messages
            return None

    def press(self, *keys: str) -> None:
        for k in keys:
            down = {"type": "keyDown", "key": k, "windowsVirtualKeyCode": KEYCODES.get(k, ord(k.upper()[0]))}
            if len(k) == 1:
                down["text"] = k
            self.send("Input.dispatchKeyEvent", down, page=True)
            self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": k}, page=True)

    def problems(self) -> list:
        """Console errors, page exceptions and network requests other than file:/data:/blob:."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown" or (m == "Runtime.consoleAPICalled" and p.get("type") == "error"):
                out.append(p)
            if m == "Network.requestWillBeSent" and not p["request"]["url"].startswith(("file:", "data:", "blob:")):
                out.append(p["request"]["url"])
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def browser(tmp_path):
    b = Browser(Path(tempfile.mkdtemp(dir=tmp_path)))
    yield b
    b.close()


@needs_chromium
def test_label_session_export_and_calibrate(run, tmp_path, browser):
    page = render_label_page(run, n=6, seed=0, out=tmp_path / "label.html", progress=False)
    browser.load(page.as_uri())
    items = browser.eval("JSON.parse(document.getElementById('label-data').textContent).items")
    assert len(items) == 6 and all(len(it["questions"]) >= 3 for it in items)
    # item 1: yes, no, yes (the cursor then sits on its 4th question); → next image: unsure, no;
    # j skips a question, y answers the one after
    browser.press("y", "n", "y", "ArrowRight", "u", "n", "j", "y")
    st = browser.eval("labelState()")
    q1, q2 = items[0]["questions"], items[1]["questions"]
    expect = {f"{items[0]['key']}|{q1[0]['question_id']}": "yes", f"{items[0]['key']}|{q1[1]['question_id']}": "no",
              f"{items[0]['key']}|{q1[2]['question_id']}": "yes", f"{items[1]['key']}|{q2[0]['question_id']}": "unsure",
              f"{items[1]['key']}|{q2[1]['question_id']}": "no", f"{items[1]['key']}|{q2[3]['question_id']}": "yes"}
    assert st["answers"] == expect and browser.eval("document.body.dataset.answered") == "6"
    browser.press("k", "n")  # back one question (q2[3]) and overwrite it
    expect[f"{items[1]['key']}|{q2[3]['question_id']}"] = "no"
    assert browser.eval("labelState()")["answers"] == expect
    browser.press("k", "Backspace")  # answering moved on: back again, then clear it
    del expect[f"{items[1]['key']}|{q2[3]['question_id']}"]
    assert browser.eval("labelState()")["answers"] == expect
    browser.press("n")
    expect[f"{items[1]['key']}|{q2[3]['question_id']}"] = "no"

    csv_text = browser.eval("exportCsv()")
    # the button downloads exactly the same text
    dl = tmp_path / "downloads"
    dl.mkdir()
    browser.send("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(dl), "eventsEnabled": True})
    browser.eval("document.getElementById('export').click()")
    begun = browser.event("Browser.downloadWillBegin")
    browser.event("Browser.downloadProgress", lambda p: p["guid"] == begun["guid"] and p["state"] != "inProgress")
    got = dl / begun["suggestedFilename"]
    assert list(dl.iterdir()) == [got]
    assert got.read_text() == csv_text
    assert browser.problems() == []

    df = pd.read_csv(got, dtype=str, keep_default_na=False)
    assert list(df.columns) == SHEET_COLUMNS and len(df) == 6
    assert sorted(df["label"]) == ["", "0", "0", "0", "1", "1"]  # unsure → empty label
    assert (df.loc[df["question_id"] == "", "kind"] == "prompt").all()
    r = CliRunner().invoke(app, ["calibrate", str(run), "--labels", str(got), "--bootstrap", "20"])
    assert r.exit_code == 0, r.output
    rep = json.loads((Path(run) / "calibration" / "report.json").read_text())
    assert rep["n_labels"] == 5  # the unsure row is skipped by calibrate
    prompt_rows = int(((df["question_id"] == "") & (df["label"] != "")).sum())
    for name, e in rep["scorers"].items():
        assert e["matched"] == 5 and e["unmatched"] == 0, name
        assert e["levels"]["prompt"]["all"]["n"] == prompt_rows
    # every exported row names a real image of the run
    paths = {i["path"] for i in read_jsonl(Path(run) / "images.jsonl")}
    assert set(df["image"]) <= paths
    # after the export (a skip below loses nothing else of this test)
    # what the page stored, read back in this document: autosave is on and holds every answer
    assert browser.eval("document.getElementById('save-note').textContent") == "autosave on"
    key = browser.eval("Object.keys(localStorage).find(function (k) { return k.indexOf('t2i-audit-label:') === 0; })")
    read_kept = f"JSON.parse(localStorage.getItem({json.dumps(key)}) || 'null')"
    stored = browser.eval(read_kept)
    assert stored and stored["answers"] == expect, stored
    # autosave: a reload restores every answer. Two duties, told apart: the browser keeps what the page stored,
    # the page restores what the browser kept. Under load Chromium can show a file:// page's new document an
    # empty or older localStorage although the writes were made (measured: 2 of 3 runs beside two busy loops;
    # twice on a loaded CI machine no reload in 20 got them back). So reload until the page restores the
    # answers, a bounded number of times (the page writes only when answering, so a reload changes nothing
    # stored); if it never does, the test fails only when the browser did hand the answers to the last document
    # (the page's failure), and skips when the browser never did (the browser's).
    for _ in range(20):
        browser.load(page.as_uri())
        restored = browser.eval("labelState()")["answers"]
        if restored == expect:
            break
    else:
        kept = browser.eval(read_kept)
        if not kept or kept["answers"] != expect:
            pytest.skip(f"Chromium did not give a reloaded page back its localStorage in 20 loads (it held "
                        f"{kept!r}): the browser's failure, not the page's, which stored every answer")
    assert restored == expect
    assert browser.eval("exportCsv()") == csv_text


@needs_chromium
def test_prompt_text_stays_text(run, tmp_path, browser):
    page = render_label_page(run, n=1000, seed=0, out=tmp_path / "all.html", progress=False)
    browser.load(page.as_uri())
    items = browser.eval("JSON.parse(document.getElementById('label-data').textContent).items")
    assert len(items) == len([i for i in read_jsonl(Path(run) / "images.jsonl") if not i["flags"]])
    idx = next(i for i, it in enumerate(items) if it["prompt"] == EVIL)
    browser.press(*["ArrowRight"] * idx)
    assert browser.eval("document.getElementById('prompt').textContent") == EVIL
    assert browser.eval("document.title") != "pwned" and browser.problems() == []
