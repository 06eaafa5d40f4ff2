"""``t2i-audit label``: stratified sampling, the page, and a person's session in headless Chromium.

The browser is driven through the Chrome DevTools Protocol (cdp.py): real key presses
(``Input.dispatchKeyEvent``), a reload to check the autosave, and a click on "Export CSV" with
downloads allowed (``Browser.setDownloadBehavior``). Browser tests skip without Chromium, as in
test_browser.py. Every wait waits for the condition it checks (the new document's own state, the
download's "completed" event), never for a time or a proxy, so a loaded machine only makes it slower.
"""

import json
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cdp import Browser, needs_chromium
from synth import make_prompts, make_run

from t2i_audit.cli import app
from t2i_audit.errors import AuditError
from t2i_audit.report.label import SHEET_COLUMNS, allocate, render_label_page, stratified_sample
from t2i_audit.rundir import RunDir, read_jsonl
from t2i_audit.scorers.calibrate import export_sheet

LABEL_READY = "typeof window.labelState === 'function'"  # the page's script has run
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


# --- headless Chromium (cdp.py) ------------------------------------------------------------


@pytest.fixture
def browser(tmp_path):
    b = Browser(Path(tempfile.mkdtemp(dir=tmp_path)))
    yield b
    b.close()


@needs_chromium
def test_label_session_export_and_calibrate(run, tmp_path, browser):
    page = render_label_page(run, n=6, seed=0, out=tmp_path / "label.html", progress=False)
    browser.load(page.as_uri(), LABEL_READY)
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
        browser.load(page.as_uri(), LABEL_READY)
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
    browser.load(page.as_uri(), LABEL_READY)
    items = browser.eval("JSON.parse(document.getElementById('label-data').textContent).items")
    assert len(items) == len([i for i in read_jsonl(Path(run) / "images.jsonl") if not i["flags"]])
    idx = next(i for i, it in enumerate(items) if it["prompt"] == EVIL)
    browser.press(*["ArrowRight"] * idx)
    assert browser.eval("document.getElementById('prompt').textContent") == EVIL
    assert browser.eval("document.title") != "pwned" and browser.problems() == []
