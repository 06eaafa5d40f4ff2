"""Hostile input (issue 20, "Bounded input"): every reader of a user's file — suite YAML, run
config, each importer, model folders, activation arrays — refuses it with ``file:line`` and the
reason (AuditError, exit 2), never a traceback, in bounded time and memory; CSV we write never
carries a spreadsheet formula.

The fixed cases are the drill's findings; the properties throw generated hostile YAML / JSONL /
CSV / text at the suite loader and at every registered importer.
"""

import csv
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from t2i_audit.errors import AuditError, SuiteError
from t2i_audit.importers import IMPORTERS, import_prompts, read_prompt_records
from t2i_audit.prompts import expand_files

from ..spine.test_suite_validation import GOOD
from .test_malformed_corpus import _invoke, _snapshot

REPO = Path(__file__).resolve().parents[2]
LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))  # 9**9 values


def _limited():  # the child may not take the machine down if the bound is missing
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("argv,name", [(["prompts", "validate"], "bomb.yaml"), (["run", "--config"], "run.yaml")])
def test_yaml_alias_bomb_is_refused_quickly(tmp_path, argv, name):
    # before: expanded without bound (MemoryError traceback under a memory cap, minutes)
    (tmp_path / name).write_text(LAUGHS + ("model: tiny-sd\nprompts: *i\n" if name == "run.yaml" else ""))
    assert len((tmp_path / name).read_bytes()) < 700
    r = subprocess.run([sys.executable, "-m", "t2i_audit.cli", *argv, name], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, preexec_fn=_limited)
    assert r.returncode == 2, r.stderr[-2000:]
    # the message proves the bound (expansion stopped at the limit); no wall-clock assertion: a loaded
    # CI machine must not fail a test that is about refusal, not speed
    assert f"{name}:" in r.stderr and "expands to more than" in r.stderr and "Traceback" not in r.stderr


SUITE_CASES = {
    # a list or a mapping as a key: before, str() of the node list became a key
    "list-key": (GOOD.replace("suite: demo", "suite: demo\n? [a, b]\n: x"), ":2:", "a key must be a plain name"),
    # before: ConstructorError traceback
    "python-name": (GOOD.replace("version: 1", "version: !!python/name:os.system x"), ":2:", "not allowed"),
    "self-alias": (GOOD + "extra: &e [*e]\n", ":17:", "contains it"),
    "deep": (GOOD + "extra: " + "[" * 3000 + "]" * 3000 + "\n", ":17:", "nested"),
    "control-char": (GOOD + "extra: \x1f\n", ":17:", "special characters are not allowed"),
}


@pytest.mark.parametrize("name", list(SUITE_CASES))
def test_hostile_suite_is_refused_with_its_line(tmp_path, monkeypatch, capsys, name):
    text, line, reason = SUITE_CASES[name]
    (tmp_path / "suite.yaml").write_text(text)
    before = _snapshot(tmp_path)
    code, err = _invoke(["prompts", "validate", "suite.yaml"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err, err
    assert f"suite.yaml{line}" in err and reason in err, err
    assert _snapshot(tmp_path) == before


def test_line_separators_inside_strings_survive_export_and_import(tmp_path, monkeypatch, capsys):
    # before: `prompts export` wrote a record whose U+2028 splitlines() cut: "Unterminated string"
    (tmp_path / "suite.yaml").write_text(GOOD.replace("values: [red, blue]", 'values: ["red\u2028ish", "blue\u0085"]'))
    code, err = _invoke(["prompts", "export", "suite.yaml", "--out", "p.jsonl"], tmp_path, monkeypatch, capsys)
    assert code in (0, None), err
    recs = read_prompt_records(tmp_path / "p.jsonl")
    assert len(recs) == 8 and any("red\u2028ish" in r["text"] for r in recs)
    # the importers too: one prompt, one record, whatever it holds
    meta = {"tag": "single_object", "include": [{"class": "cat", "count": 1}], "prompt": "a photo of a cat\u2028\u2029!"}
    (tmp_path / "g.jsonl").write_text(json.dumps(meta, ensure_ascii=False) + "\n" + json.dumps(meta) + "\n")
    assert [r["text"] for r in import_prompts(tmp_path / "g.jsonl", "geneval")] == [meta["prompt"]] * 2
    (tmp_path / "color_val.txt").write_text("a red cup\u2028and a blue bench\na green kite\r\n")
    assert [r["text"] for r in import_prompts(tmp_path / "color_val.txt", "t2i-compbench")] == [
        "a red cup\u2028and a blue bench", "a green kite"]
    rows = (REPO / "tests/fixtures/import/dpg_small.csv").read_text().replace("Is there a kettle?", "Is there\u2028a kettle?")
    (tmp_path / "d.csv").write_text(rows)
    assert import_prompts(tmp_path / "d.csv", "dpg")[0]["questions"][0]["text"] == "Is there\u2028a kettle?"


GENEVAL = {"tag": "counting", "include": [{"class": "cat", "count": 2}], "prompt": "a photo of two cats"}
IMPORT_CASES = {  # name: (format, file text, location, reason); before: a traceback or a bad record
    "nested-json": ("geneval", '{"tag": ' + "[" * 100_000 + "]" * 100_000 + "}\n", ":1:", "nested too deeply"),
    "nested-records": ("records", "[" * 100_000 + "\n", ":1:", "nested too deeply"),
    "count-infinity": ("geneval", json.dumps(GENEVAL).replace("2}", "Infinity}") + "\n", ":1:", "Infinity is not finite"),
    "count-1e999": ("geneval", json.dumps(GENEVAL).replace("2}", "1e999}") + "\n", ":1:", "1e999 is not finite"),
    "count-negative": ("geneval", json.dumps(GENEVAL).replace("2}", "-3}") + "\n", ":1:", "count -3 of 'cat'"),
    "count-true": ("geneval", json.dumps(GENEVAL).replace("2}", "true}") + "\n", ":1:", "count True"),
    "class-dict": ("geneval", json.dumps({**GENEVAL, "include": [{"class": {"x": 1}, "count": 2}]}) + "\n", ":1:",
                   "class {'x': 1} must be a non-empty string"),
    "relation-dict": ("geneval", json.dumps({"tag": "position", "prompt": "a cat left of a dog", "include": [
        {"class": "dog", "count": 1}, {"class": "cat", "count": 1, "position": [{"left": 1}, 0]}]}) + "\n", ":1:",
                      "position relation"),
    "csv-huge-field": ("dpg", "item_id,text,proposition_id,dependency,tuple,question_natural_language\n"
                              "a,t,1,0,x,q\nb,\"" + "x" * 140_000 + "\",1,0,x,q\n", ":3:", "field larger than field limit"),
    "record-slots-list": ("records", None, ":1:", "slots"),
}


@pytest.mark.parametrize("name", list(IMPORT_CASES))
def test_hostile_import_file_is_refused_with_its_line(tmp_path, monkeypatch, capsys, name):
    fmt, text, line, reason = IMPORT_CASES[name]
    if text is None:  # a PromptRecord of the wrong shape: every stage would crash on it later
        good = import_prompts(REPO / "tests/fixtures/import/color_val.txt", "t2i-compbench")[0]
        text = json.dumps({**good, "slots": ["c1", "o1"]}) + "\n"
    path = tmp_path / "in.jsonl"
    path.write_text(text)
    with pytest.raises(AuditError) as e:
        read_prompt_records(path) if fmt == "records" else import_prompts(path, fmt)
    assert str(e.value).startswith(f"{path}{line}") and reason in str(e.value), str(e.value)
    if fmt != "records":  # the CLI: exit 2, the same message, no traceback, no output file
        code, err = _invoke(["prompts", "import", "in.jsonl", "-f", fmt, "-o", "out.jsonl"], tmp_path, monkeypatch, capsys)
        assert code == 2 and "Traceback" not in err and reason in err and not (tmp_path / "out.jsonl").exists()


MODEL_INDEX = {  # before: AttributeError / JSONDecodeError tracebacks, or a run that failed later
    "list": ("[1, 2]", "expected a JSON object"),
    "broken": ('{"_class_name": ', "not valid JSON"),
    "unknown-class": ('{"_class_name": "EvilPipeline"}', "'EvilPipeline' is not a pipeline class of diffusers"),
    "class-list": ('{"_class_name": ["diffusers", "X"]}', "is not the name of a diffusers pipeline class"),
}


@pytest.mark.parametrize("name", list(MODEL_INDEX))
def test_hostile_model_folder_is_refused(tmp_path, monkeypatch, capsys, name):
    text, reason = MODEL_INDEX[name]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model_index.json").write_text(text)
    (tmp_path / "suite.yaml").write_text(GOOD)
    before = _snapshot(tmp_path)
    code, err = _invoke(["run", "--model", "./m", "--prompts", "suite.yaml", "--stages", "prompts"], tmp_path,
                        monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err, err
    assert "model_index.json" in err and reason in err, err
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("name", ["list", "broken"])
def test_text_encoder_loader_reads_model_index_like_the_model_resolver(tmp_path, name):
    # before: probes/capture/pipeline_text kept its own json.loads reader: JSONDecodeError / AttributeError
    from t2i_audit.probes.capture.pipeline_text import load_text_pipeline

    text, reason = MODEL_INDEX[name]
    (tmp_path / "model_index.json").write_text(text)
    with pytest.raises(AuditError, match=re.escape(str(tmp_path / "model_index.json")) + ".*" + reason):
        load_text_pipeline(str(tmp_path))


def test_corrupt_activation_array_names_the_file(tmp_path):
    # before: ValueError traceback from numpy under `probe`
    from t2i_audit.probes.capture.activations import load_array

    (tmp_path / "layer__eos.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(AuditError, match=re.escape(str(tmp_path / "layer__eos.npy")) + ": corrupt activation array"):
        load_array(tmp_path, "layer__eos")


FORMULAS = ["=HYPERLINK(\"http://x\",\"y\")", "+1+2", "-2+3", "@SUM(A1)", "\tx", "\rx"]


def test_results_csv_cells_never_start_a_formula(tmp_path):
    # before: written unchanged
    import pandas as pd

    from t2i_audit.report.tables import write_tables

    from t2i_audit.csvsafe import safe_cell

    assert safe_cell("\rx") == "'\rx"  # (a bare CR inside a cell would also split this test's row)
    df = pd.DataFrame({"prompt": [*FORMULAS[:-1], "a=b", "plain"], "value": [-0.5, 1.0, -2.0, 3.0, 0.0, -1.0, 2.0]})
    write_tables(df, tmp_path, "results")
    rows = list(csv.DictReader(io.StringIO((tmp_path / "results.csv").read_text(), newline="")))
    assert [r["prompt"] for r in rows] == ["'" + f for f in FORMULAS[:-1]] + ["a=b", "plain"]
    assert [float(r["value"]) for r in rows] == list(df["value"])  # numbers stay numbers
    assert list(pd.read_parquet(tmp_path / "results.parquet")["prompt"]) == list(df["prompt"])  # data untouched


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to run the label page's JavaScript")
def test_label_page_csv_export_never_starts_a_formula():
    page = (REPO / "t2i_audit/report/templates/label.html.j2").read_text()
    fn = re.search(r"function csvField\(v\) \{.*?\n  \}", page, re.S).group(0)
    script = fn + f"\nprocess.stdout.write(JSON.stringify({json.dumps([*FORMULAS, 'a=b', 3, -1])}.map(csvField)));"
    got = json.loads(subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True).stdout)
    assert got == ['"\'=HYPERLINK(""http://x"",""y"")"', "'+1+2", "'-2+3", "'@SUM(A1)", "'\tx", "\"'\rx\"",
                   "a=b", "3", "-1"]  # quoted where CSV needs it; numbers stay numbers


# --- properties: generated hostile input, every reader ------------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12) | st.sampled_from(
    ["\u2028", "\u2029", "\x85", "\x00", "\r", "=cmd", "-1", "{", "[", '"', "'", "NaN", "Infinity", "x" * 200])
SCALARS = st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats() | TEXT
JSONISH = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                       max_leaves=20)


def _bomb(levels: int, fanout: int) -> str:
    names = [f"l{i}" for i in range(levels + 1)]
    out = f"{names[0]}: &{names[0]} [x, y]\n"
    for prev, cur in zip(names, names[1:]):
        out += f"{cur}: &{cur} [{', '.join(['*' + prev] * fanout)}]\n"
    return out


def _replace_at(data, path, value):
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return data


def _paths(data, prefix=()):
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, prefix + (i,))


GOOD_DATA = __import__("yaml").safe_load(GOOD)
GOOD_PATHS = [p for p in _paths(GOOD_DATA) if p]


@st.composite
def hostile_suites(draw) -> str:
    import copy

    import yaml

    kind = draw(st.sampled_from(["mutate", "soup", "bomb", "splice"]))
    if kind == "mutate":  # a good suite with one value replaced by anything
        data = _replace_at(copy.deepcopy(GOOD_DATA), draw(st.sampled_from(GOOD_PATHS)), draw(JSONISH))
        return yaml.safe_dump(data, allow_unicode=draw(st.booleans()))
    if kind == "soup":  # YAML tokens in any order
        tokens = ["&a ", "*a", "[", "]", "{", "}", ": ", "- ", "\n", "  ", "? ", "!!python/name:os.system ",
                  "!!binary ", "!!set ", "<<: *a\n", "|\n  ", "'", '"', "\u2028", "suite", "concepts", "templates",
                  "family", "values", "1", "-1", ".inf", ".nan", "~", ",", "#", "%YAML 1.1\n", "---\n", "...\n"]
        return "".join(draw(st.lists(st.sampled_from(tokens) | TEXT, max_size=60)))
    if kind == "bomb":  # small to large fanout: under the bound it builds, over it is refused
        return GOOD + _bomb(draw(st.integers(1, 7)), draw(st.integers(2, 12)))
    lines = GOOD.split("\n")  # splice a hostile line anywhere
    i = draw(st.integers(0, len(lines)))
    return "\n".join(lines[:i] + [draw(TEXT | st.sampled_from(["? [a]\n: b", "x: !!python/object:os.system {}",
                                                                  "&z [*z]", "<<: 3"]))] + lines[i:])


def _assert_located(err: Exception, path: Path) -> None:
    lines = err.problems if isinstance(err, SuiteError) else [str(err)]
    for line in lines:
        assert re.match(re.escape(str(path)) + r"(:\d+)?: ", line), line


# no per-example deadline: these properties are about refusal with a location, and a wall-clock deadline
# fails them on a loaded machine (bounded work is asserted by the messages, e.g. "expands to more than")
PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """First calls import modules and load the shipped suites: not the input's cost."""
    fix = REPO / "tests/fixtures/import"
    for fmt, name in (("geneval", "geneval_metadata.jsonl"), ("t2i-compbench", "color_val.txt"), ("dpg", "dpg_small.csv")):
        import_prompts(fix / name, fmt)
    expand_files([REPO / "prompts/colors.yaml"])


@PROPERTY
@given(text=hostile_suites())
def test_suite_loader_refuses_hostile_yaml_with_a_location(text):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "suite.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            expand_files([path])
        except AuditError as e:  # SuiteError is one
            _assert_located(e, path)


def _json_line(value) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=True)


GENEVAL_LIKE = st.fixed_dictionaries({"tag": JSONISH | st.sampled_from(["counting", "position"]), "prompt": JSONISH | TEXT,
                                      "include": st.lists(st.fixed_dictionaries(
                                          {"class": JSONISH | TEXT, "count": JSONISH},
                                          optional={"color": JSONISH, "position": st.tuples(JSONISH, JSONISH)}),
                                          max_size=3) | JSONISH},
                                     optional={"exclude": JSONISH})
DPG_HEADER = "item_id,text,proposition_id,dependency,tuple,question_natural_language"
CSV_FIELD = TEXT | st.integers(-5, 5).map(str) | st.sampled_from(["0", "1,2", "entity - whole (cat)",
                                                                  "attribute - color (cat, red)", "other - count (cat, ==3)",
                                                                  "x" * 131_073])
LINES = st.one_of(
    JSONISH.map(_json_line), GENEVAL_LIKE.map(_json_line),
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    st.lists(CSV_FIELD, min_size=1, max_size=7).map(lambda row: _csv_row(row)),
    TEXT, st.sampled_from(["a red cup and a blue bench", "two cats and three dogs", "a cat on the left of a dog"]))


def _csv_row(row) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow(row)
    return buf.getvalue().rstrip("\r\n")


@st.composite
def hostile_files(draw) -> str:
    lines = draw(st.lists(LINES, max_size=8))
    if draw(st.booleans()):
        lines.insert(0, DPG_HEADER)
    return draw(st.sampled_from(["\n", "\r\n", "\u2028"])).join(lines) + draw(st.sampled_from(["", "\n"]))


READERS = {fmt: (lambda p, fmt=fmt: import_prompts(p, fmt)) for fmt in IMPORTERS}
READERS["records"] = read_prompt_records  # `run --prompts x.jsonl` reads through it


@pytest.mark.parametrize("reader", list(READERS))
@PROPERTY
@given(text=hostile_files())
def test_every_importer_refuses_hostile_files_with_a_location(reader, text):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "color_val.txt"  # the T2I-CompBench category comes from the name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            records = READERS[reader](path)
        except AuditError as e:
            _assert_located(e, path)
            return
        assert records and all(isinstance(r, dict) and isinstance(r["id"], str) for r in records)
        json.dumps(records, allow_nan=False)  # what we pass on is strict JSON
