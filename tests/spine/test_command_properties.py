"""Properties every command keeps, checked over the commands the Typer app itself registers
(``typer.main.get_command``, sub-apps included), so the next command added is held to them too:

(a) an input path that does not exist, or is an empty file / an empty folder, gives exit 2 and a
    message naming it — never a Python traceback;
(b) an ``--out`` folder holding a user's file is refused and left byte-identical; an existing
    single-file output is never replaced without ``--force``;
(c) a command that prints progress has ``-q/--quiet`` (and, where its valid call is quick, ``-q``
    leaves stderr empty).

A command missing from :data:`CASES` fails :func:`test_every_registered_command_has_a_case`, and a
path parameter whose role is not stated fails :func:`test_every_path_parameter_has_a_role`. Every
case runs the real entry point (``t2i_audit.cli.main``, as ``t2i-audit`` does) and fails before any
model loads; the valid calls marked ``quick`` run whole on a synthetic run of 4 prompts.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import sys
import sysconfig
import typing
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer

from t2i_audit import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from synth import make_prompts, make_run  # noqa: E402

IN_FILE, IN_DIR, OUT_FILE, OUT_DIR = "in-file", "in-dir", "out-file", "out-dir"


@dataclass
class Case:
    """A minimal valid call. ``{name}`` stands for path parameter ``name`` (its valid value is the
    world input named in ``values``, else a fresh path for an output); ``@NAME`` is a world input."""

    argv: list[str]
    paths: dict[str, str]  # every path parameter of the command → its role
    values: dict[str, str] = field(default_factory=dict)  # input parameter → world input
    quick: bool = False  # the valid call runs whole in about a second: run it (exit 0)
    progress: bool = False  # prints progress although its source does not say "progress"
    xfail: dict[str, str] = field(default_factory=dict)  # "<property>:<param>" → reason (another's fix)
    # (tests/spine/test_command_safety.py) the path parameters naming a folder this call writes into — its
    # writer lock is held while it runs — and, per input parameter, the record kinds (t2i_audit.records) read there
    writes: set[str] = field(default_factory=set)
    reads: dict[str, set[str]] = field(default_factory=dict)


RUN_READS = {"prompts", "images", "scores", "manifest", "summary", "calibration", "refusals"}  # what a run's report reads

CASES: dict[str, Case] = {
    "run": Case(["run", "--model", "mini", "--prompts", "{prompts}", "--limit", "4", "-n", "1", "--stages", "prompts",
                 "--out", "{out}"],
                {"prompts": IN_FILE, "config": IN_FILE, "out": OUT_DIR}, {"prompts": "SUITE", "config": "CONFIG"},
                quick=True, writes={"out"}, reads={"out": {"images", "image-shard", "prompts"}}),
    "models": Case(["models"], {}, quick=True),
    "verify": Case(["verify", "{run_dir}"], {"run_dir": IN_DIR}, {"run_dir": "RUN"}),  # synthetic: not pristine
    # (verify reads every record kind, and reports what its readers refuse: test_command_safety.py)
    "label": Case(["label", "{run_dir}", "--n", "2", "--out", "{out}"], {"run_dir": IN_DIR, "out": OUT_FILE},
                  {"run_dir": "RUN"}, quick=True, progress=True, reads={"run_dir": {"prompts", "images", "manifest"}}),
    "prompts validate": Case(["prompts", "validate", "{files}"], {"files": IN_FILE}, {"files": "SUITE"}, quick=True),
    "prompts show": Case(["prompts", "show", "{file}"], {"file": IN_FILE}, {"file": "SUITE"}, quick=True),
    "prompts export": Case(["prompts", "export", "{files}", "--out", "{out}"], {"files": IN_FILE, "out": OUT_FILE},
                           {"files": "SUITE"}, quick=True),
    "prompts import": Case(["prompts", "import", "{file}", "--format", "geneval", "--out", "{out}"],
                           {"file": IN_FILE, "vocab": IN_FILE, "out": OUT_FILE},
                           {"file": "GENEVAL", "vocab": "SUITE"}, quick=True),
    "score": Case(["score", "{run}", "-s", "mini-pixel", "--device", "cpu"], {"run": IN_DIR, "card": IN_FILE},
                  {"run": "RUN", "card": "CARD"}, writes={"run"},
                  reads={"run": {"prompts", "images", "scores", "manifest", "score-shard"}}),
    "scorers": Case(["scorers"], {"card": IN_FILE}, {"card": "CARD"}, quick=True),
    "calibrate": Case(["calibrate", "{run}", "--labels", "{labels}", "--bootstrap", "10"],
                      {"run": IN_DIR, "labels": IN_FILE, "export_sheet": OUT_FILE, "card": IN_FILE},
                      {"run": "RUN", "labels": "LABELS", "card": "CARD"}, quick=True, writes={"run"},
                      reads={"run": {"prompts", "images", "scores", "calibration"}}),
    "probe": Case(["probe", "{run}", "--model", "mini"], {"run": IN_DIR}, {"run": "RUN"}, writes={"run"},
                  reads={"run": {"prompts", "images", "scores", "manifest", "summary", "calibration",
                                 "activation-index"}}),
    "predict": Case(["predict", "--model", "mini", "--prompts", "{prompts}", "--from", "{from_run}", "--out", "{out}"],
                    {"prompts": IN_FILE, "from_run": IN_DIR, "out": OUT_FILE}, {"prompts": "JSONL", "from_run": "RUN"},
                    progress=True, reads={"from_run": {"failure-probe"}}),
    "select": Case(["select", "--from", "{from_run}", "--limit", "4", "--out", "{out}"],
                   {"from_run": IN_DIR, "prompts": IN_FILE, "out": OUT_DIR}, {"from_run": "RUN", "prompts": "SUITE"},
                   writes={"out"}, reads={"from_run": {"early-probes"}}),
    "report": Case(["report", "{run}", "--out", "{out}"], {"run": IN_DIR, "out": OUT_DIR}, {"run": "RUN"}, quick=True,
                   writes={"run", "out"}, reads={"run": RUN_READS}),
    "compare": Case(["compare", "{runs}", "@RUN2", "--out", "{out}"], {"runs": IN_DIR, "out": OUT_DIR},
                    {"runs": "RUN"}, quick=True, writes={"out"}, reads={"runs": RUN_READS - {"refusals"}}),
    "board": Case(["board", "{runs}", "--out", "{out}"], {"runs": IN_DIR, "out": OUT_DIR}, {"runs": "REPORTED"},
                  quick=True, writes={"out"}, reads={"runs": {"prompts", "manifest", "scores", "calibration"}}),
    "mini train-judge": Case(["mini", "train-judge", "--smoke", "--out", "{out}"], {"out": OUT_DIR}, writes={"out"}),
    "mini train-generator": Case(["mini", "train-generator", "--smoke", "--out", "{out}"],
                                 {"out": OUT_DIR, "track": OUT_DIR}, writes={"out"}),
    # a run folder stands in for a training output (OUTPUT_DIR must be a folder; its checkpoints are found later)
    "track": Case(["track", "{output_dir}", "--model", "mini", "--prompts", "{prompts}", "--limit", "2", "--steps", "2",
                   "--out", "{out}"],
                  {"output_dir": IN_DIR, "prompts": IN_FILE, "out": OUT_DIR}, {"output_dir": "RUN", "prompts": "SUITE"},
                  writes={"out"}),
    "mini eval-judges": Case(["mini", "eval-judges", "--judge", "{judge}", "--n", "1", "--no-write"],
                             {"judge": IN_DIR}, {"judge": "JUDGE"}),
    "mini eval-generator": Case(["mini", "eval-generator", "--model", "{model}", "--suite", "{suite}", "--samples", "1",
                                 "--limit", "1", "--no-write", "--grid", "{grid}"],
                                {"model": IN_DIR, "suite": IN_FILE, "grid": OUT_FILE},
                                {"model": "GENERATOR", "suite": "SUITE"}),
    "mini sweep": Case(["mini", "sweep", "--smoke", "--out", "{out}"], {"out": OUT_DIR}, writes={"out"}),
    "mini render": Case(["mini", "render", "a red circle", "--out", "{out}"], {"out": OUT_FILE}, quick=True),
}


# ------------------------------------------------------------------ the commands, as Typer registers them


@dataclass
class Param:
    name: str
    flag: str | None  # None: a positional argument
    is_path: bool
    is_bool: bool
    decls: tuple[str, ...]


def _commands() -> dict[str, object]:
    """Every leaf command of the app by its full name ("prompts show"), from Typer's own click tree."""
    out: dict[str, object] = {}

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs is not None:
            for name, sub in subs.items():
                walk(sub, [*path, name])
        else:
            out[" ".join(path)] = cmd

    walk(typer.main.get_command(cli.app), [])
    return out


def _params(cmd) -> list[Param]:
    """The command function's parameters with their flags (the function's signature is stable across Typer
    versions; the click objects it builds are not)."""
    fn = inspect.unwrap(cmd.callback)
    hints = typing.get_type_hints(fn)
    out = []
    for name, p in inspect.signature(fn).parameters.items():
        info = p.default
        is_option = isinstance(info, typer.models.OptionInfo)
        decls = tuple(getattr(info, "param_decls", None) or ())
        if is_option and not decls:
            decls = ("--" + name.replace("_", "-"),)
        longs = [d for decl in decls for d in decl.replace("/", " ").split() if d.startswith("--")]
        hint = hints.get(name)
        out.append(Param(name, (longs[0] if longs else decls[0]) if is_option else None,
                         Path in {hint, *_flatten(hint)}, hint is bool, decls))
    return out


def _flatten(hint) -> set:
    args = set(typing.get_args(hint))
    return args | {a for x in args for a in _flatten(x)}


COMMANDS = _commands()


def _quiet_flags(params: list[Param]) -> set[str]:
    return {d for p in params if p.is_bool for decl in p.decls for d in decl.replace("/", " ").split()} & {"-q", "--quiet"}


# ------------------------------------------------------------------ running a command as a user does


def invoke(argv: list[str], cwd: Path, monkeypatch, capsys, *, columns: int = 500) -> tuple[object, str]:
    """(exit code, stdout + stderr) of ``t2i-audit ARGV`` through the real entry point; a Python exception that
    escapes it (what a user would see as a traceback) comes back as the exception itself."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["t2i-audit", *argv])
    monkeypatch.setenv("COLUMNS", str(columns))  # 500: a usage error's box must not wrap a long path
    code: object = 0
    try:
        cli.main()
    except SystemExit as e:
        code = e.code if e.code is not None else 0
    except BaseException as e:  # noqa: BLE001 — the property is that nothing but SystemExit escapes
        code = e
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def _snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def world(tmp_path_factory, repo_root) -> dict[str, Path]:
    """The valid inputs: two synthetic runs, a suite, prompts JSONL, a labels CSV, a scorer card, a GenEval
    file, a run.yaml, and the shipped mini judge and generator (read only)."""
    import pandas as pd

    from t2i_audit.mini.cli import WEIGHTS
    from t2i_audit.scorers.calibrate import export_sheet

    root = tmp_path_factory.mktemp("world")
    prompts = make_prompts(n_binding=2, n_rel=1, n_count=1)
    w = {"RUN": make_run(root / "run", prompts=prompts, samples=1, black=0),
         "REPORTED": make_run(root / "reported", prompts=prompts, samples=1, black=0, config={"steps": 4}),
         "RUN2": make_run(root / "run2", prompts=prompts, samples=1, black=0, skill=0.5),
         "SUITE": root / "mini.yaml", "JSONL": root / "run" / "prompts.jsonl", "LABELS": root / "labels.csv",
         "CARD": root / "card.yaml", "GENEVAL": root / "evaluation_metadata.jsonl", "CONFIG": root / "cfg" / "run.yaml",
         "JUDGE": WEIGHTS / "judge", "GENERATOR": WEIGHTS / "generator"}
    from t2i_audit.report import render_report

    render_report(w["REPORTED"], progress=False)  # the board reads runs a report finished
    shutil.copy(repo_root / "prompts" / "mini.yaml", w["SUITE"])
    shutil.copy(repo_root / "tests" / "fixtures" / "import" / "geneval_metadata.jsonl", w["GENEVAL"])
    export_sheet(w["RUN"], w["LABELS"], per="question")
    sheet = pd.read_csv(w["LABELS"], dtype=str, keep_default_na=False)
    sheet["label"] = ["1" if i % 3 else "0" for i in range(len(sheet))]
    sheet.to_csv(w["LABELS"], index=False)
    w["CARD"].write_text("scorers:\n  - name: mini-pixel-copy\n    class: t2i_audit.mini.pixel_judge:PixelJudge\n"
                         "    family: detect\n    description: a copy\n    measures: questions\n    range: [0, 1]\n"
                         "    higher_is_better: true\n    model: {id: mini-pixel-judge, revision: v1}\n")
    w["CONFIG"].parent.mkdir()
    w["CONFIG"].write_text(f"model: mini\nprompts: [{w['SUITE']}]\nlimit: 4\nimages_per_prompt: 1\nstages: [prompts]\n")
    return w


def _argv(case: Case, world: dict, tmp: Path, **given: str) -> list[str]:
    """The case's call with ``given`` parameter values (added as ``--flag VALUE`` when not in the call)."""
    values = {name: str(world[key]) for name, key in case.values.items()}
    values.update({name: str(tmp / f"new-{name}") for name, role in case.paths.items() if role.startswith("out")})
    values.update(given)
    argv = []
    for tok in case.argv:
        if tok.startswith("{") and tok.endswith("}"):
            argv.append(values[tok[1:-1]])
        elif tok.startswith("@"):
            argv.append(str(world[tok[1:]]))
        else:
            argv.append(tok)
    for name in given:
        if "{" + name + "}" not in case.argv:
            argv += [_flag(case, name), given[name]]
    return argv


def _flag(case: Case, name: str) -> str:
    (cmd_name,) = [k for k, v in CASES.items() if v is case]
    (p,) = [p for p in _params(COMMANDS[cmd_name]) if p.name == name]
    assert p.flag, f"{cmd_name}: positional {name} must be in the case's argv"
    return p.flag


def _cases(*roles: str) -> list:
    out = []
    for cmd_name, case in CASES.items():
        for name, role in case.paths.items():
            if role in roles:
                out.append(pytest.param(cmd_name, name, id=f"{cmd_name.replace(' ', '-')}:{name}"))
    return out


def _xfail(request, case: Case, prop: str, name: str) -> None:
    reason = case.xfail.get(f"{prop}:{name}")
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


def _clean_refusal(code, out: str, path: Path) -> None:
    assert not isinstance(code, BaseException), f"a traceback reached the user: {code!r}\n{out}"
    assert code == 2, f"exit {code}, expected 2\n{out}"
    assert "Traceback" not in out, out
    assert str(path) in out, f"the message does not name {path}:\n{out}"


# ------------------------------------------------------------------ the table covers every command


def test_the_commands_tested_are_the_package_meant():
    """From the checkout, the checkout's commands (an editable install); in CI's wheel lane
    (T2I_AUDIT_INSTALLED=1, tests copied away from the checkout) the installed wheel's."""
    where = Path(cli.__file__).resolve()
    if os.environ.get("T2I_AUDIT_INSTALLED"):
        assert Path(sysconfig.get_paths()["purelib"]).resolve() in where.parents, where
    else:
        assert where.parent == Path(__file__).resolve().parents[2] / "t2i_audit", where


def test_every_registered_command_has_a_case():
    assert set(COMMANDS) == set(CASES), ("commands without a case (add one to CASES)", set(COMMANDS) - set(CASES),
                                         "cases of no command", set(CASES) - set(COMMANDS))
    assert len(COMMANDS) >= 22  # sub-apps included: prompts …, mini …


@pytest.mark.parametrize("cmd_name", sorted(CASES))
def test_every_path_parameter_has_a_role(cmd_name):
    paths = {p.name for p in _params(COMMANDS[cmd_name]) if p.is_path}
    assert set(CASES[cmd_name].paths) == paths, f"{cmd_name}: state the role of every path parameter"
    assert all(role in (IN_FILE, IN_DIR, OUT_FILE, OUT_DIR) for role in CASES[cmd_name].paths.values())


# ------------------------------------------------------------------ (a) missing and empty inputs


@pytest.mark.parametrize("cmd_name,name", _cases(IN_FILE, IN_DIR))
def test_missing_input_path_is_named_with_exit_2(cmd_name, name, world, tmp_path, monkeypatch, capsys, request):
    case = CASES[cmd_name]
    _xfail(request, case, "missing", name)
    missing = tmp_path / "no-such" / f"missing-{name}{Path(str(world.get(case.values.get(name), ''))).suffix}"
    code, out = invoke(_argv(case, world, tmp_path, **{name: str(missing)}), tmp_path, monkeypatch, capsys)
    _clean_refusal(code, out, missing)
    assert not missing.parent.exists(), "a refused command created its missing input's folder"


@pytest.mark.parametrize("cmd_name,name", _cases(IN_FILE, IN_DIR))
def test_empty_input_is_named_with_exit_2(cmd_name, name, world, tmp_path, monkeypatch, capsys, request):
    case = CASES[cmd_name]
    _xfail(request, case, "empty", name)
    empty = tmp_path / f"empty-{name}{Path(str(world[case.values[name]])).suffix}"
    if case.paths[name] == IN_DIR:
        empty.mkdir()
    else:
        empty.write_bytes(b"")
    code, out = invoke(_argv(case, world, tmp_path, **{name: str(empty)}), tmp_path, monkeypatch, capsys)
    _clean_refusal(code, out, empty)


# ------------------------------------------------------------------ (b) outputs: nothing of the user's replaced


@pytest.mark.parametrize("cmd_name,name", _cases(OUT_DIR))
def test_foreign_out_folder_is_refused_and_left_intact(cmd_name, name, world, tmp_path, monkeypatch, capsys, request):
    case = CASES[cmd_name]
    _xfail(request, case, "foreign", name)
    foreign = tmp_path / "mine"
    (foreign / "sub").mkdir(parents=True)
    (foreign / "notes.txt").write_text("my notes\n")
    (foreign / "sub" / "index.html").write_text("<p>my page</p>\n")
    before = _snapshot(tmp_path)
    code, out = invoke(_argv(case, world, tmp_path, **{name: str(foreign)}), tmp_path, monkeypatch, capsys)
    _clean_refusal(code, out, foreign)
    assert _snapshot(tmp_path) == before, "a refused command wrote or removed something"


@pytest.mark.parametrize("cmd_name,name", _cases(OUT_FILE))
def test_existing_out_file_is_kept_without_force(cmd_name, name, world, tmp_path, monkeypatch, capsys, request):
    case = CASES[cmd_name]
    _xfail(request, case, "file", name)
    mine = tmp_path / "mine.txt"
    mine.write_text("my notes\n")
    before = _snapshot(tmp_path)
    code, out = invoke(_argv(case, world, tmp_path, **{name: str(mine)}), tmp_path, monkeypatch, capsys)
    _clean_refusal(code, out, mine)
    assert "--force" in out
    assert _snapshot(tmp_path) == before
    assert any("--force" in d for p in _params(COMMANDS[cmd_name]) for d in p.decls), f"{cmd_name}: no --force"


# ------------------------------------------------------------------ (c) -q wherever progress is printed


@pytest.mark.parametrize("cmd_name", sorted(CASES))
def test_progress_printers_have_quiet(cmd_name):
    src = inspect.getsource(inspect.unwrap(COMMANDS[cmd_name].callback))
    prints_progress = CASES[cmd_name].progress or "progress" in src or "log=" in src
    flags = _quiet_flags(_params(COMMANDS[cmd_name]))
    if prints_progress:
        assert flags == {"-q", "--quiet"}, f"{cmd_name} prints progress: it needs -q/--quiet (has {sorted(flags)})"


@pytest.mark.parametrize("cmd_name", sorted(k for k, v in CASES.items() if v.quick))
def test_quick_valid_call_succeeds_and_is_quiet_with_q(cmd_name, world, tmp_path, monkeypatch, capsys):
    """The table's valid calls are valid (so the refusals above are for the path under test), and -q
    silences stderr."""
    case = CASES[cmd_name]
    (tmp_path / "a").mkdir()
    code, out = invoke(_argv(case, world, tmp_path / "a"), tmp_path / "a", monkeypatch, capsys)
    assert code == 0, out
    if _quiet_flags(_params(COMMANDS[cmd_name])):
        (tmp_path / "b").mkdir()
        monkeypatch.chdir(tmp_path / "b")
        monkeypatch.setattr(sys, "argv", ["t2i-audit", *_argv(case, world, tmp_path / "b"), "-q"])
        with pytest.raises(SystemExit) as e:
            cli.main()
        assert e.value.code in (0, None)
        assert capsys.readouterr().err == ""
