"""What the user sees, over every command the Typer app registers (sub-apps and the stage packages' ``register(app)``
commands included, so a command added later is held to the same properties):

* every ``--help`` page renders through typer's rich console (help text is rich markup there: a bracket such as
  ``[/file.safetensors]`` is read as a closing tag and crashes the page; ``[@rev]`` silently vanishes), in a narrow
  and a wide terminal, exit 0, and shows every option's help as its author wrote it;
* a bad call (an option the command does not have, a missing argument) ends in one message naming the place, no
  traceback.
"""

from __future__ import annotations

import re

import click
import pytest
import typer

from t2i_audit import cli

from .test_command_properties import CASES, COMMANDS, _argv, _params, invoke, world  # noqa: F401 (world: fixture)

BOX = re.compile(r"[\u2500-\u257f]")  # rich's panel borders


def _plain(text: str) -> str:
    """Words only: panel borders gone and every run of whitespace one space (rich wraps at spaces)."""
    return " ".join(BOX.sub(" ", text).split())


def _meant(help_text: str) -> str:
    """A help string as its author meant it read: rich markup escapes (``\\[``) shown as the bracket."""
    return _plain(help_text.replace("\\[", "["))


def _help_pages() -> list:
    names = [""] + sorted({" ".join(n.split()[:i]) for n in COMMANDS for i in range(1, len(n.split()) + 1)})
    return [pytest.param(n, id=n.replace(" ", "-") or "t2i-audit") for n in names]


def _click_command(name: str):
    cmd = typer.main.get_command(cli.app)
    for part in name.split():
        cmd = cmd.commands[part]
    return cmd


@pytest.mark.parametrize("columns", [60, 200])
@pytest.mark.parametrize("name", _help_pages())
def test_every_help_page_renders(name, columns, tmp_path, monkeypatch, capsys):
    code, out = invoke([*name.split(), "--help"], tmp_path, monkeypatch, capsys, columns=columns)
    assert code == 0, f"`t2i-audit {name} --help` at {columns} columns: {code!r}\n{out[-2000:]}"
    assert "Traceback" not in out and "Usage" in out, out
    if columns < 200:  # a narrow terminal folds long words; the words are checked in the wide one
        return
    page = _plain(out)
    cmd = _click_command(name)
    if cmd.help:  # the command's own text, its first paragraph
        assert _meant(cmd.help.split("\n\n")[0]) in page, f"`{name} --help` does not show its description"
    for p in cmd.params:
        text = getattr(p, "help", None)
        if text and not (isinstance(p, click.Option) and p.name == "help"):
            assert _meant(text) in page, f"`{name} --help` does not show {'/'.join(p.opts)}'s help as written:\n" \
                                         f"{_meant(text)}\n---\n{page}"


def test_help_shows_the_lora_syntax_with_its_brackets(tmp_path, monkeypatch, capsys):
    """The page a LoRA user reads: the optional revision and file, brackets and all."""
    code, out = invoke(["run", "--help"], tmp_path, monkeypatch, capsys, columns=200)
    assert code == 0, out
    assert "hf:org/repo[@rev][/file.safetensors]" in _plain(out)
    assert "hf:org/repo[@rev], a local pipeline folder" in _plain(out)


# ------------------------------------------------------------------ bad calls: one located message


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_an_unknown_option_is_one_located_message(name, tmp_path, monkeypatch, capsys):
    code, out = invoke([*name.split(), "--no-such-option"], tmp_path, monkeypatch, capsys)
    assert code == 2, f"{name}: {code!r}\n{out}"
    assert "Traceback" not in out and "No such option: --no-such-option" in out, out


def _device_commands() -> list:
    out = []
    for name, case in CASES.items():
        if any("--device" in p.decls for p in _params(COMMANDS[name])):
            out.append(pytest.param(name, id=name.replace(" ", "-")))
    return out


@pytest.mark.parametrize("name", _device_commands())
def test_a_device_torch_does_not_know_is_refused_by_name(name, world, tmp_path, monkeypatch, capsys):
    """``--device tpu``: torch's RuntimeError came from inside the pipeline, after the run folder was made."""
    argv = [a for a in _argv(CASES[name], world, tmp_path)]
    if "--device" in argv:  # the case's own --device replaced
        i = argv.index("--device")
        del argv[i:i + 2]
    code, out = invoke([*argv, "--device", "tpu"], tmp_path, monkeypatch, capsys)
    assert not isinstance(code, BaseException), f"{name}: a traceback reached the user: {code!r}\n{out}"
    assert code == 2, f"{name}: exit {code}\n{out}"
    assert "error: --device tpu: not a device" in out, out
    assert not list(tmp_path.glob("new-*")), "a refused call made its output"


# ------------------------------------------------------------------ numbers on the terminal, progress, no noise


def test_compare_ends_with_its_numbers(world, tmp_path, monkeypatch, capsys):
    """Not only the page's path: the ranking with its CIs and success per category, the numbers of compare.json."""
    import json

    out = tmp_path / "cmp"
    code, said = invoke(["compare", str(world["RUN"]), str(world["RUN2"]), "--out", str(out)], tmp_path, monkeypatch,
                        capsys)
    assert code == 0, said
    summary = json.loads((out / "compare.json").read_text())
    lines = said.splitlines()
    assert any(line.split()[:3] == ["rank", "model", "success"] for line in lines), said
    for r in summary["ranking"]:
        row = [line for line in lines if f" {r['model']} " in f" {line} " and "[" in line]
        assert row and f"{r['rate']:.1%} [{r['lo']:.1%}, {r['hi']:.1%}]" in row[0], (r, said)
    for cat, by_model in summary["category_rates"].items():
        (row,) = [line for line in lines if line.split()[:1] == [cat]]
        for m in summary["models"]:
            assert f"{by_model[m]['rate']:.1%} of {by_model[m]['n']}" in row, (cat, m, said)


def test_calibrate_says_what_it_bootstraps_and_q_hides_it(world, tmp_path, monkeypatch, capsys):
    argv = ["calibrate", str(world["RUN"]), "--labels", str(world["LABELS"]), "--bootstrap", "10"]
    code, said = invoke(argv, tmp_path, monkeypatch, capsys)
    assert code == 0, said
    assert "[calibrate] vqa-blip: agreement on 13 labels" in said and "10 bootstrap resamples each" in said, said
    monkeypatch.setattr("sys.argv", ["t2i-audit", *argv, "-q"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code in (0, None)
    assert capsys.readouterr().err == ""


def test_a_degenerate_bootstrap_is_not_a_warning():
    """scipy's DegenerateDataWarning ("The BCa confidence interval cannot be calculated") reached the terminal of
    every command whose statistic was undefined on some resamples; the interval says so itself (NaN)."""
    import warnings

    import numpy as np

    from t2i_audit.stats import bootstrap_ci

    def corr(x, y):
        return np.corrcoef(x, y)[0, 1]

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        lo, hi = bootstrap_ci(corr, [1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0])
    assert np.isnan(lo) and np.isnan(hi)
    assert [str(w.message) for w in seen] == []


def test_a_library_hint_that_points_nowhere_is_dropped():
    """diffusers' load error ends "Please check out the root cause in the stacktrace above." — no stack trace is
    shown (by design), so the sentence is dropped and the message kept."""
    from t2i_audit.quiet import library_message

    e = OSError("Cannot load model org/x: the model is not fully cached locally (no file) and an error occurred while "
                "trying to fetch metadata from the Hub. Please check out the root cause in the stacktrace above.")
    assert library_message(e) == ("Cannot load model org/x: the model is not fully cached locally (no file) and an "
                                  "error occurred while trying to fetch metadata from the Hub.")


def test_report_ends_with_its_headline(world, tmp_path, monkeypatch, capsys):
    """``report`` printed only the page's path; now the headline ``run`` ends with, from the summary just written."""
    import json

    from t2i_audit.report.headline import headline_text

    code, said = invoke(["report", str(world["RUN"]), "--out", str(tmp_path / "rep"), "-q"], tmp_path, monkeypatch,
                        capsys)
    assert code == 0, said
    summary = json.loads((world["RUN"] / "summary.json").read_text())
    line = headline_text(summary["report"])
    assert line and f"headline: {line}" in said.splitlines(), said
    assert said.rstrip().endswith(str(tmp_path / "rep" / "index.html"))


BAD_VALUES = {  # command → (the option, a value it does not take, what the message must name)
    "run": ("--dtype", "float64", "dtype: Input should be 'float32', 'float16' or 'bfloat16'"),  # even without generate
    "track": ("--dtype", "float64", "dtype: Input should be"),  # was each checkpoint "not audited", exit 0
    "run-offload": ("--offload", "always", "offload"),
    "run-stages": ("--stages", "prompts,paint", "unknown stage(s) paint"),
    "calibrate": ("--per", "row", "--per must be prompt, question or both, not 'row'"),
    "label": ("--n", "0", "--n must be positive, not 0"),
    "board": ("--images", "sideways", "--images 'sideways'"),
    "prompts import": ("--format", "csv", "unknown import format 'csv'"),
}


@pytest.mark.parametrize("key", sorted(BAD_VALUES))
def test_an_option_value_the_command_does_not_take_is_one_located_message(key, world, tmp_path, monkeypatch, capsys):
    name = key.split("-")[0] if key.startswith("run") else key
    flag, value, named = BAD_VALUES[key]
    argv = _argv(CASES[name], world, tmp_path)
    if flag in argv:
        i = argv.index(flag)
        del argv[i:i + 2]
    if name == "calibrate":  # --per shapes the sheet --export-sheet writes
        argv += ["--export-sheet", str(tmp_path / "sheet.csv")]
    code, out = invoke([*argv, flag, value], tmp_path, monkeypatch, capsys)
    assert not isinstance(code, BaseException), f"a traceback reached the user: {code!r}\n{out}"
    assert code == 2, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and named in errors[0], out
    assert "Traceback" not in out


@pytest.mark.parametrize("command,made", [("train-generator", "model_index.json"), ("sweep", "sweep.json")])
def test_mini_training_q_prints_nothing_on_stderr(command, made, tmp_path, monkeypatch, capsys):
    """Saving a trained pipeline printed diffusers' "modules … should be kept in float32: []. Casting directly with
    `to()` …" (there are none) and transformers' "Writing model shards" bars, -q or not; the sweep added the
    libraries' truncation warnings about the 8-token mini model's prompts (by design) and a torch_dtype
    FutureWarning."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["t2i-audit", "mini", command, "--smoke", "--out", str(tmp_path / "g"), "-q"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    cap = capsys.readouterr()
    assert e.value.code in (0, None), cap.err
    assert cap.err == "", cap.err
    assert (tmp_path / "g" / made).is_file()


def test_a_lora_run_q_prints_nothing_on_stderr(tmp_path):
    """`run --lora … -q` printed transformers' "Loading weights" bar: checking the LoRA against the base loads the
    base's components before our own bar policy (generate.silence_loading_bars) applies. A fresh process, since
    an earlier test in this one may have switched the libraries' bars off for good."""
    import subprocess
    import sys

    from t2i_audit.tiny.lora import build_lora

    build_lora("mini", str(tmp_path / "my_lora"))
    r = subprocess.run([sys.executable, "-m", "t2i_audit", "run", "--model", "mini", "--prompts", "mini", "--limit", "2",
                        "--lora", f"{tmp_path / 'my_lora'}:0.8", "--stages", "prompts,generate", "-q",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    assert len((tmp_path / "r" / "images.jsonl").read_text().splitlines()) == 2
