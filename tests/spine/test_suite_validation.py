"""Every malformed suite gets an error naming file, key path, line and reason; nothing is written."""

import subprocess
import sys
import textwrap

import pytest

from t2i_audit.errors import SuiteError
from t2i_audit.prompts import expand, load_suite

GOOD = """\
suite: demo
version: 1
concepts:
  objects: {family: object, values: [cube, sphere]}
  colors: {family: color, values: [red, blue]}
templates:
  - name: two
    category: color_binding
    text: "{c1.a} {o1} and {c2.a} {o2}"
    slots: {c1: colors, o1: objects, c2: colors, o2: objects}
    constraints: ["o1 != o2"]
    expect:
      objects:
        - {id: o1, color: c1}
        - {id: o2, color: c2}
    twins: [[c1, c2]]
"""


def write(tmp_path, text, name="suite.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


# (replace this, with that) → expected fragments of the message
BAD = [
    ("version: 1", "version: 1\nversion: 2", ["duplicate key", ":3:", "version"]),
    ("category: color_binding", "category: color_binding\n    colour: red", ["templates[0].colour", "unknown key", ":9:"]),
    ("c1: colors, o1", "c1: colours, o1", ["undefined concept list 'colours'", "Did you mean 'colors'"]),
    ("values: [red, blue]", "values: []", ["concepts.colors.values", "at least 1"]),
    ('"o1 != o2"', '"o1 !== o2"', ["cannot parse constraint", "constraints[0]"]),
    ('"o1 != o2"', '"o1 != o9"', ["unknown slot 'o9'"]),
    ("{c1.a} {o1} and", "{c1.a} {o1} {x} and", ["placeholder {x} has no slot"]),
    ("{c1.a} {o1} and", "{c1.shout} {o1} and", ["unknown placeholder field .shout"]),
    ("- {id: o1, color: c1}", "- {id: o1, colr: c1}", ["expect.objects[0].colr", "unknown key"]),
    ("- {id: o1, color: c1}", "- {id: c1, color: c1}", ["'c1' is not an object slot"]),
    ("twins: [[c1, c2]]", "twins: [[c1, o2]]", ["different families"]),
    ('"o1 != o2"', '"o1 == o2", "o1 != o2"', ["expands to no prompt"]),
    ("suite: demo", "suite: Demo Suite!", ["suite", "should match pattern"]),
    ("family: color", "family: colour", ["concepts.colors.family", "Input should be"]),
    ("text: \"{c1.a}", "text: [\"{c1.a}", ["invalid YAML"]),
]


@pytest.mark.parametrize("old,new,fragments", BAD, ids=[b[1][:30] for b in BAD])
def test_bad_suite_is_located(tmp_path, old, new, fragments):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SuiteError) as e:
        expand(load_suite(path))
    msg = str(e.value)
    assert str(path) in msg
    for f in fragments:
        assert f in msg, (f, msg)


def test_good_suite_expands(tmp_path):
    recs = expand(load_suite(write(tmp_path, GOOD)))
    assert len(recs) == 8  # 2 colours × 2 objects × 2 colours × 1 remaining object


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(SuiteError, match="file not found"):
        load_suite(tmp_path / "nope.yaml")
    with pytest.raises(SuiteError, match="empty file"):
        load_suite(write(tmp_path, ""))


def test_huge_expansion_refused(tmp_path):
    many = ", ".join(f"o{i}" for i in range(200))
    text = GOOD.replace("values: [cube, sphere]", f"values: [{many}]").replace("values: [red, blue]", f"values: [{many.replace('o', 'c')}]")
    with pytest.raises(SuiteError, match="combinations"):
        load_suite(write(tmp_path, text))


def test_cli_exit_2_and_writes_nothing(tmp_path):
    bad = write(tmp_path, GOOD.replace("c1: colors, o1", "c1: colours, o1"))
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "t2i_audit", "run", "--model", "tiny-sd", "--prompts", str(bad),
                        "--out", str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "undefined concept list 'colours'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


def test_cli_unknown_model_did_you_mean(tmp_path):
    good = write(tmp_path, GOOD)
    r = subprocess.run([sys.executable, "-m", "t2i_audit", "run", "--model", "sd-xll", "--prompts", str(good),
                        "--out", str(tmp_path / "run")], capture_output=True, text=True)
    assert r.returncode == 2
    assert "unknown model 'sd-xll'" in r.stderr and "'sd-xl'" in r.stderr
    assert not (tmp_path / "run").exists()


def test_prompts_validate_cli(repo_root):
    r = subprocess.run([sys.executable, "-m", "t2i_audit", "prompts", "validate", str(repo_root / "prompts/colors.yaml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "1500 prompts" in r.stdout


def test_help_and_prompts_do_not_import_torch(repo_root):
    code = ("import sys; from t2i_audit.cli import app; from typer.testing import CliRunner; "
            f"r = CliRunner().invoke(app, ['prompts', 'show', r'{repo_root / 'prompts/spatial.yaml'}', '-n', '1']); "
            "assert r.exit_code == 0, r.output; "
            "r2 = CliRunner().invoke(app, ['--help']); assert r2.exit_code == 0; "
            "print(sorted(m for m in ('torch', 'diffusers', 'transformers', 'open_clip') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
