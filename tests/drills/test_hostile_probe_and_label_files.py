"""Generated damage for the readers added since the first drill (issue 26): the fitted probe files
(``probes/failure_probe.json``, ``probes/early_probes.json``) and label sheets (``calibrate --labels``).
Every example ends in a valid load — whose arrays then hold what a reader relies on — or an AuditError
whose message starts with the file's path; never another exception. Same pattern as
test_hostile_input.py (its strategies, its bounded-time settings).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from t2i_audit.errors import AuditError
from t2i_audit.probes.probe_files import load_early_probes, load_failure_probe
from t2i_audit.scorers.calibrate import calibrate, read_labels

from .test_hostile_input import JSONISH, PROPERTY, TEXT, _assert_located, _paths

FAILURE = {"encoder": "text_encoder", "layer": "h02", "pooling": "eos", "fingerprint": "f" * 16, "model": "tiny-sd",
           "oof_auroc": 0.7, "n": 30, "failure_rate": 0.4, "mean": [0.0, 1.0, 2.0], "scale": [1.0, 2.0, 3.0],
           "coef": [0.1, -0.2, 0.3], "intercept": 0.5, "compositions": ["red cube", "blue ball"],
           "labels_from": {"color": {"scorer": "mini-pixel"}}}
_PROBE = {"C": 0.1, "median": [0.0, 1.0, 0.0, 0.0], "mean": [0.5, 1.0, 0.2, 0.1], "scale": [1.0, 0.5, 0.4, 0.3],
          "coef": [0.3, -0.1, 0.2, 0.0], "intercept": -0.2}
EARLY = {"onehot": ["c1=red", "template=t"], "steps": [1, 3], "model": "mini", "key": "k" * 16,
         "settings": {"steps": 20, "guidance": 7.0, "size": 32, "dtype": "float32", "seed": 0},
         "categories": {"color": {"t001": _PROBE, "t003": copy.deepcopy(_PROBE)}}}
ODD = st.sampled_from([math.nan, math.inf, -math.inf, 0, 0.0, -1.0, 1e308, "", "0.5", [], {}, True, None])


def _drop_at(data, path):
    node = data
    for k in path[:-1]:
        node = node[k]
    del node[path[-1]]
    return data


def _set_at(data, path, value):
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return data


@st.composite
def damaged_json(draw, good: dict) -> bytes:
    data = copy.deepcopy(good)
    paths = [p for p in _paths(good) if p]
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["replace", "odd", "drop", "grow", "none"]))
        live = [p for p in paths if _exists(data, p)]
        if not live or kind == "none":
            continue
        path = draw(st.sampled_from(live))
        if kind == "replace":
            _set_at(data, path, draw(JSONISH))
        elif kind == "odd":
            _set_at(data, path, draw(ODD))
        elif kind == "drop":
            _drop_at(data, path)
        else:  # a list one longer: arrays of one probe out of step
            node = _get(data, path)
            if isinstance(node, list):
                node.append(draw(st.floats(allow_nan=False) | JSONISH))
    text = json.dumps(data, allow_nan=True, ensure_ascii=draw(st.booleans()))
    how = draw(st.sampled_from(["plain", "truncate", "big-number", "utf-16", "bom", "latin-1", "bytes"]))
    if how == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif how == "big-number":
        text = text.replace("0.5", "1e999", 1)
    if how == "utf-16":
        return text.encode("utf-16")
    if how == "bom":
        return b"\xef\xbb\xbf" + text.encode()
    if how == "latin-1":
        return text.replace("red", "r\xe9d").encode("latin-1", errors="replace")
    if how == "bytes":
        raw = bytearray(text.encode())
        if raw:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        return bytes(raw)
    return text.encode("utf-8", errors="surrogatepass")


def _get(data, path):
    for k in path:
        data = data[k]
    return data


def _exists(data, path) -> bool:
    try:
        _get(data, path)
        return True
    except (KeyError, IndexError, TypeError):
        return False


def _finite_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                                       for x in v)


def _check_probe(p: dict, arrays: tuple[str, ...]) -> None:
    """What a reader relies on after a valid load: equal-length finite arrays, positive scales."""
    assert all(_finite_list(p[a]) for a in arrays)
    assert len({len(p[a]) for a in arrays}) == 1 and len(p[arrays[0]]) > 0
    assert all(s > 0 for s in p["scale"]) and math.isfinite(p["intercept"])


def _write(raw: bytes, d: str, name: str) -> Path:
    path = Path(d) / "probes" / name
    path.parent.mkdir()
    path.write_bytes(raw)
    return path


@PROPERTY
@given(raw=damaged_json(FAILURE))
def test_failure_probe_loader_refuses_damage_with_its_path(raw):
    with tempfile.TemporaryDirectory() as d:
        path = _write(raw, d, "failure_probe.json")
        try:
            probe = load_failure_probe(d)
        except AuditError as e:
            _assert_located(e, path)
            return
        _check_probe(probe, ("mean", "scale", "coef"))
        assert 0 <= probe["oof_auroc"] <= 1 and isinstance(probe["encoder"], str) and probe["encoder"]


@PROPERTY
@given(raw=damaged_json(EARLY))
def test_early_probes_loader_refuses_damage_with_its_path(raw):
    with tempfile.TemporaryDirectory() as d:
        path = _write(raw, d, "early_probes.json")
        try:
            fitted = load_early_probes(d)
        except AuditError as e:
            _assert_located(e, path)
            return
        for by_step in fitted["categories"].values():
            for tag, probe in by_step.items():
                assert int(tag[1:]) in fitted["steps"]
                _check_probe(probe, ("median", "mean", "scale", "coef"))
                assert len(probe["coef"]) > len(fitted["onehot"])
        assert isinstance(fitted["settings"]["steps"], int) and fitted["settings"]["steps"] >= 1


# --- label sheets --------------------------------------------------------------------------------------------

HEADERS = [["prompt_id", "sample", "question_id", "label"]] * 3 + [
    ["image", "label"], ["prompt_id", "sample", "label"], ["prompt_id", "label"], ["label"], []]
ODD_LABEL = st.sampled_from(["inf", "-inf", "nan", "NaN", "1e999", "0.5", "3", "maybe", " 1 ", "1_0", ""]) | TEXT

@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """3 prompts × 2 images with vqa-blip prompt and question records (written here, no model)."""
    from t2i_audit.rundir import append_jsonl
    from t2i_audit.scorers.base import Scorer, ScoreItem
    from t2i_audit.scorers.registry import get_card

    from ..scorers.scenes import draw, make_run, prompt

    ps = [prompt("red", "square", "blue", "circle", pid=f"p{i:012d}", category="color") for i in range(3)]
    rd = make_run(tmp_path_factory.mktemp("labels") / "run",
                  [(p, draw([("square", "red", (2, 2, 20, 20))])) for p in ps for _ in range(2)])
    s = Scorer(get_card("vqa-blip"))
    recs = []
    for img in rd.read_images():
        p = next(q for q in ps if q["id"] == img["prompt_id"])
        it = ScoreItem(p, img)
        v = img["sample"] == 0
        recs += [s.record(it, "question", question_id=q["id"], value=0.8 if v else 0.2, verdict=v)
                 for q in p["questions"]]
        recs.append(s.prompt_record(it, v, [], value=0.8 if v else 0.2))
    append_jsonl(rd.scores("vqa-blip"), recs)
    return rd


@st.composite
def label_sheets(draw, images: list[dict], qids: list[str]) -> bytes:
    """Mostly sound sheets (so the whole calibration runs on many), each row damaged one time in three."""
    header = list(draw(st.sampled_from(HEADERS)))
    if draw(st.integers(0, 5)) == 0:
        header.insert(draw(st.integers(0, len(header))), draw(TEXT))
    rows = []
    for _ in range(draw(st.integers(0, 8))):
        img = draw(st.sampled_from(images))
        cell = {"prompt_id": img["prompt_id"], "sample": str(img["sample"]),
                "question_id": draw(st.sampled_from(["", *qids])), "image": img["path"],
                "label": draw(st.sampled_from(["1", "0", "yes", "no"]))}
        if draw(st.integers(0, 2)) == 0:
            field = draw(st.sampled_from(sorted(cell)))
            cell[field] = draw({"prompt_id": st.sampled_from(["pdeadbeef0000", ""]) | TEXT,
                                "sample": st.sampled_from(["7", "-1", "x", ""]) | TEXT,
                                "question_id": st.just("q9") | TEXT,
                                "image": st.sampled_from(["nope.png", ""]) | TEXT, "label": ODD_LABEL}[field])
        row = [cell.get(h, draw(TEXT)) for h in header]
        if draw(st.integers(0, 5)) == 0:  # a row too short or too long for its header
            row = row[:-1] if draw(st.booleans()) else row + [draw(TEXT)]
        rows.append(row)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator=draw(st.sampled_from(["\n", "\r\n", "\r"])))
    if header:
        w.writerow(header)
    w.writerows(rows)
    text = buf.getvalue()
    enc = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1"]))
    return text.encode(enc, errors="replace" if enc == "latin-1" else "surrogatepass")


@PROPERTY
@given(data=st.data())
def test_label_sheet_reader_refuses_damage_with_its_place(run, data):
    images = run.read_images()
    qids = sorted({q["id"] for p in run.read_prompts() for q in p["questions"]})
    raw = data.draw(label_sheets(images, qids))
    keys = {(i["prompt_id"], i["sample"]) for i in images}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "labels.csv"
        path.write_bytes(raw)
        try:
            rows = read_labels(path, run)
            report = calibrate(run, path, n_boot=0, write=False)  # the whole command on what was read
        except AuditError as e:
            _assert_located(e, path)
            return
        assert rows and all(math.isfinite(r["label"]) and r["key"] in keys for r in rows)
        assert len({(r["key"], r["question_id"]) for r in rows}) == len(rows)  # one label per (image, question)
        assert any(e["matched"] for e in report["scorers"].values())
        json.dumps(report, allow_nan=False)  # what is stored is strict JSON
