"""A corpus of malformed inputs — suites, run configs, model names, run directories. Each must
give a clear error naming the place, exit code 2, no traceback, and write nothing."""

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

from t2i_audit import cli

from ..spine.test_suite_validation import BAD, GOOD

# --- suites beyond the located-error corpus of tests/spine --------------------------------
SUITE_CASES = {
    "root-is-list": ("- a\n- b\n", ["expected a mapping"]),
    "tab-indent": (GOOD.replace("  objects:", "\tobjects:"), ["invalid YAML"]),
    "version-list": (GOOD.replace("version: 1", "version: [1]"), ["version"]),
    "templates-mapping": (GOOD.replace("templates:\n  - name: two", "templates:\n  two:\n    name: two"), ["templates"]),
    "slots-list": (GOOD.replace("slots: {c1: colors, o1: objects, c2: colors, o2: objects}", "slots: [c1, o1]"), ["slots"]),
    "values-string": (GOOD.replace("values: [red, blue]", "values: red"), ["concepts.colors.values"]),
    "value-unknown-key": (GOOD.replace("values: [red, blue]", "values: [{name: red, hue: 0}]"), ["hue", "unknown key"]),
    "value-empty-name": (GOOD.replace("values: [red, blue]", "values: [{name: ''}]"), ["name"]),
    "count-without-number": (GOOD.replace("colors: {family: color, values: [red, blue]}",
                                          "colors: {family: color, values: [red, blue]}\n  n: {family: count, values: [two]}"),
                             ["count value needs 'number'"]),
    "duplicate-value": (GOOD.replace("values: [red, blue]", "values: [red, red]"), ["duplicate value 'red'"]),
    "duplicate-template": (GOOD + GOOD[GOOD.index("  - name: two"):], ["duplicate template name"]),
    "heldout-both": (GOOD + "heldout: {bind: [color, object], fraction: 0.2, compositions: [[red, cube]]}\n", ["exactly one of"]),
    "heldout-unknown-value": (GOOD + "heldout: {bind: [color, object], compositions: [[mauve, cube]]}\n", ["'mauve' is not a known color"]),
    "heldout-bad-bind": (GOOD + "heldout: {bind: [object, color], fraction: 0.2}\n", ["bind must be"]),
    "heldout-fraction-1": (GOOD + "heldout: {bind: [color, object], fraction: 1.5}\n", ["heldout.fraction"]),
    "relation-not-relation": (GOOD.replace("        - {id: o2, color: c2}", "        - {id: o2, color: c2}\n      relations:\n        - {slot: c1, subject: o1, object: o2}"),
                              ["not a relation slot"]),
    "relation-unknown-object": (GOOD.replace("        - {id: o2, color: c2}", "        - {id: o2, color: c2}\n      relations:\n        - {slot: c1, subject: o1, object: o7}"),
                                ["'o7' is not an expected object id"]),
    "sample-zero": (GOOD.replace("twins: [[c1, c2]]", "twins: [[c1, c2]]\n    sample: {max: 0}"), ["sample.max"]),
    "unused-slot": (GOOD.replace("slots: {c1: colors, o1: objects, c2: colors, o2: objects}",
                                 "slots: {c1: colors, o1: objects, c2: colors, o2: objects, c3: colors}"), ["'c3' is never used"]),
    "expect-empty": (GOOD.replace("      objects:\n        - {id: o1, color: c1}\n        - {id: o2, color: c2}", "      objects: []"), ["expect.objects"]),
    "count-wrong-slot": (GOOD.replace("- {id: o1, color: c1}", "- {id: o1, color: c1, count: c2}"), ["count must name a count slot"]),
    "attr-wrong-family": (GOOD.replace("- {id: o1, color: c1}", "- {id: o1, shape: c1}"), ["not 'shape'"]),
    "constraint-value-typo": (GOOD.replace('"o1 != o2"', '"o1 != "'), ["cannot parse constraint"]),
    "no-templates": (GOOD[: GOOD.index("templates:")] + "templates: []\n", ["templates", "at least 1"]),
    "missing-suite-key": (GOOD.replace("suite: demo\n", ""), ["suite", "Field required"]),
    "huge": (GOOD.replace("values: [cube, sphere]", "values: [" + ", ".join(f"o{i}" for i in range(120)) + "]")
                 .replace("values: [red, blue]", "values: [" + ", ".join(f"c{i}" for i in range(120)) + "]"), ["combinations"]),
}


def _invoke(argv, cwd, monkeypatch, capsys):
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["t2i-audit", *argv])
    with pytest.raises(SystemExit) as e:
        cli.main()
    cap = capsys.readouterr()
    return e.value.code, cap.err


def _snapshot(root: Path) -> dict:
    """Every file by content; a writer lock's file (``.lock``: a command that writes a run takes it before it
    reads its inputs) is no data."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".lock")}


def _assert_clean_failure(code, err, fragments, before, after):
    assert code == 2, err
    assert "Traceback" not in err and "error: " in err
    for f in fragments:
        assert f in err, (f, err)
    assert before == after, "an invalid input must not write anything"


SUITES = [(f"located-{i}", GOOD.replace(old, new, 1), frags) for i, (old, new, frags) in enumerate(BAD)]
SUITES += [(k, text, frags) for k, (text, frags) in SUITE_CASES.items()]


@pytest.mark.parametrize("name,text,fragments", SUITES, ids=[s[0] for s in SUITES])
def test_bad_suite(tmp_path, monkeypatch, capsys, name, text, fragments):
    (tmp_path / "suite.yaml").write_text(text)
    before = _snapshot(tmp_path)
    code, err = _invoke(["run", "--model", "tiny-sd", "--prompts", "suite.yaml", "--stages", "prompts"], tmp_path, monkeypatch, capsys)
    _assert_clean_failure(code, err, ["suite.yaml", *fragments], before, _snapshot(tmp_path))


def test_bad_suite_bytes(tmp_path, monkeypatch, capsys):
    (tmp_path / "suite.yaml").write_bytes(GOOD.encode().replace(b"cube", b"cub\xe9"))
    before = _snapshot(tmp_path)
    code, err = _invoke(["prompts", "validate", "suite.yaml"], tmp_path, monkeypatch, capsys)
    _assert_clean_failure(code, err, ["suite.yaml", "not UTF-8"], before, _snapshot(tmp_path))


def test_unicode_suite_is_fine(tmp_path, monkeypatch, capsys):
    (tmp_path / "suite.yaml").write_text(GOOD.replace("cube", "würfel").replace("sphere", "球"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["t2i-audit", "prompts", "validate", "suite.yaml"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code in (0, None) and "8 prompts" in capsys.readouterr().out


CONFIGS = {
    "unknown-setting": ("model: tiny-sd\nprompts: [suite.yaml]\nlimt: 3\n", ["limt", "unknown setting"]),
    "wrong-type": ("model: tiny-sd\nprompts: [suite.yaml]\nlimit: ten\n", ["limit"]),
    "negative-limit": ("model: tiny-sd\nprompts: [suite.yaml]\nlimit: -1\n", ["limit", "greater than 0"]),
    "unknown-stage": ("model: tiny-sd\nprompts: [suite.yaml]\nstages: [prompts, paint]\n", ["unknown stage(s) paint"]),
    "not-mapping": ("- model\n", ["expected a mapping"]),
    "invalid-yaml": ("model: [tiny-sd\n", ["invalid YAML"]),
    "no-prompts": ("model: tiny-sd\nprompts: []\n", ["prompts"]),
    "no-model": ("prompts: [suite.yaml]\n", ["model", "Field required"]),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_bad_run_config(tmp_path, monkeypatch, capsys, name):
    text, fragments = CONFIGS[name]
    (tmp_path / "suite.yaml").write_text(GOOD)
    (tmp_path / "run.yaml").write_text(text)
    before = _snapshot(tmp_path)
    code, err = _invoke(["run", "--config", "run.yaml"], tmp_path, monkeypatch, capsys)
    _assert_clean_failure(code, err, ["run.yaml", *fragments], before, _snapshot(tmp_path))


def test_missing_config_file(tmp_path, monkeypatch, capsys):
    code, err = _invoke(["run", "--config", "nope.yaml"], tmp_path, monkeypatch, capsys)
    _assert_clean_failure(code, err, ["nope.yaml", "not found"], {}, _snapshot(tmp_path))


MODELS = {
    "unknown": ("sd-xxl", ["unknown model 'sd-xxl'", "Did you mean"]),
    "hf-no-slash": ("hf:justarepo", ["expected hf:org/repo"]),
    "hf-empty": ("hf:", ["expected hf:org/repo"]),
    "missing-folder": ("./no-such-pipeline", ["no such folder"]),
    "folder-not-pipeline": ("./empty-folder", ["has no model_index.json"]),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_bad_model(tmp_path, monkeypatch, capsys, name):
    ref, fragments = MODELS[name]
    (tmp_path / "suite.yaml").write_text(GOOD)
    (tmp_path / "empty-folder").mkdir()
    before = _snapshot(tmp_path)
    code, err = _invoke(["run", "--model", ref, "--prompts", "suite.yaml"], tmp_path, monkeypatch, capsys)
    _assert_clean_failure(code, err, fragments, before, _snapshot(tmp_path))
    assert not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def made_run(tmp_path_factory, repo_root):
    from t2i_audit import api

    out = tmp_path_factory.mktemp("made") / "run"
    api.run_audit(api.make_config(dict(model="tiny-sd", prompts=[str(repo_root / "prompts/colors.yaml")], limit=3,
                                       steps=2, stages=["prompts", "generate"], out=str(out), device="cpu")), progress=False)
    return out


def _corrupt_middle_line(path: Path):
    lines = path.read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]
    path.write_text("\n".join(lines) + "\n")


RUNDIRS = {
    "score-missing-dir": (["score", "nope", "--scorer", "tiny-clip"], None, ["nope", "not found"]),
    "score-no-prompts": (["score", "run", "--scorer", "tiny-clip"], lambda r: (r / "prompts.jsonl").unlink(), ["prompts.jsonl"]),
    "score-corrupt-images": (["score", "run", "--scorer", "tiny-clip"], lambda r: _corrupt_middle_line(r / "images.jsonl"),
                             ["images.jsonl:2", "corrupted"]),
    "score-missing-png": (["score", "run", "--scorer", "tiny-clip"],
                          lambda r: next((r / "images").rglob("*.png")).unlink(), ["missing"]),
    "score-unknown-scorer": (["score", "run", "--scorer", "tiny-clipp"], None, ["tiny-clipp", "Did you mean"]),
    "report-missing-dir": (["report", "nope"], None, ["nope"]),
    "report-corrupt-manifest": (["report", "run"], lambda r: (r / "manifest.json").write_text("{not json"), ["manifest.json"]),
    "report-corrupt-prompts": (["report", "run"], lambda r: _corrupt_middle_line(r / "prompts.jsonl"), ["prompts.jsonl:2"]),
    "probe-missing-dir": (["probe", "nope"], None, ["nope"]),
    "compare-missing-run": (["compare", "run", "nope", "--out", "cmp"], None, ["nope"]),
    "calibrate-missing-labels": (["calibrate", "run", "--labels", "labels.csv"], None, ["labels.csv"]),
}


@pytest.mark.parametrize("name", list(RUNDIRS))
def test_bad_run_directory(tmp_path, monkeypatch, capsys, made_run, name):
    argv, damage, fragments = RUNDIRS[name]
    run = tmp_path / "run"
    shutil.copytree(made_run, run)
    if damage:
        damage(run)
    before = _snapshot(tmp_path)
    code, err = _invoke(argv, tmp_path, monkeypatch, capsys)
    _assert_clean_failure(code, err, fragments, before, _snapshot(tmp_path))


def test_corpus_size():
    n = len(SUITES) + 2 + len(CONFIGS) + 1 + len(MODELS) + len(RUNDIRS)
    assert n >= 50, n
