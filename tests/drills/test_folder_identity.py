"""Run-folder identity (issue 26, items 1 and 6). A folder records which command made it and the settings that
determine what it holds; another command, or the same command with other settings, is refused with the folder,
what made it and what differs, and nothing is written; a resume with the same settings proceeds. Default names
hash everything that changes what a folder holds, so `select` never lands in a plain run's folder. After a
kill, `verify` advises the command that resumes the run — for a select run, the select command.

On the mini generator at 2 steps, 8 prompts × 2 seeds (the session's ``probed_mini``)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from t2i_audit import api, cli

from .test_malformed_corpus import _snapshot


def _cli(argv, cwd, monkeypatch, capsys):
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["t2i-audit", *map(str, argv)])
    with pytest.raises(SystemExit) as e:
        cli.main()
    cap = capsys.readouterr()
    return e.value.code or 0, cap.out, cap.err


def _refused(code, err, fragments):
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: "), err
    for f in fragments:
        assert f in err, (f, err)


def _plain(suite):
    return ["run", "--model", "mini", "--prompts", suite, "--limit", "8", "-n", "2", "--steps", "2", "--seed", "1",
            "--stages", "prompts,generate", "-q"]


def _select(suite, probed, *extra):
    # --seed 1: seeds the probed run (seed 0) never made, and the plain run's seed
    return ["select", "--from", probed, "--prompts", suite, "--limit", "8", "--of", "2", "--keep", "1", "--seed", "1",
            "--device", "cpu", "--quiet", *extra]


@pytest.fixture(scope="module")
def suite(repo_root):
    return str(repo_root / "prompts/mini.yaml")


def test_select_never_takes_over_a_plain_run(tmp_path, monkeypatch, capsys, suite, probed_mini):
    # before: both defaulted to runs/mini_mini_<same hash>: the plain run's images.jsonl rewritten, exit 0
    code, _, err = _cli(_plain(suite), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    [plain] = list((tmp_path / "runs").iterdir())
    before = _snapshot(plain)
    code, _, err = _cli(_select(suite, probed_mini, "--at", "0.5"), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert _snapshot(plain) == before
    [sel] = [p for p in (tmp_path / "runs").iterdir() if p != plain]
    assert "_select_" in sel.name
    marker = json.loads((sel / ".t2i-audit.json").read_text())
    assert marker["kind"] == "run" and marker["command"] == "select" and marker["settings"]["at"] == 0.5
    # named explicitly: refused, located, nothing written
    code, _, err = _cli(_select(suite, probed_mini, "--at", "0.5", "--out", plain), tmp_path, monkeypatch, capsys)
    _refused(code, err, [f"{plain}: made by `t2i-audit run`, not by `t2i-audit select`",
                         f"t2i-audit run --config {plain}/run.yaml --out {plain}"])
    assert _snapshot(plain) == before
    # and the other way: `run --config SEL/run.yaml` would generate every seed in full; it names the select command
    sel_before = _snapshot(sel)
    code, _, err = _cli(["run", "--config", sel / "run.yaml", "-q"], tmp_path, monkeypatch, capsys)
    _refused(code, err, [f"{sel.relative_to(tmp_path)}: made by `t2i-audit select`, not by `t2i-audit run`",
                         "t2i-audit select --from", "--at 0.5"])
    assert _snapshot(sel) == sel_before


def test_same_command_with_other_settings_is_refused_and_the_same_resumes(tmp_path, monkeypatch, capsys, suite,
                                                                           probed_mini):
    # before: the second select reused the scan risks made at --at 0.5 and stated --at 1.0 in selection.json
    out = tmp_path / "sel"
    code, _, err = _cli(_select(suite, probed_mini, "--at", "0.5", "--out", out), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    before = _snapshot(out)
    code, _, err = _cli(_select(suite, probed_mini, "--at", "1.0", "--keep", "2", "--out", out), tmp_path,
                        monkeypatch, capsys)
    _refused(code, err, [f"{out}: made by `t2i-audit select` with other settings", "at: 0.5 → 1.0",
                         "keep: 1 → 2", "choose another output folder"])
    assert _snapshot(out) == before
    # the same settings (another batch size, which a resume keeps as planned): proceeds, nothing remade
    code, _, err = _cli(_select(suite, probed_mini, "--at", "0.5", "--out", out, "--batch-size", "3"), tmp_path,
                        monkeypatch, capsys)
    assert code == 0, err
    after = _snapshot(out)
    assert {k: after[k] for k in before if k.startswith("images")} == {k: v for k, v in before.items()
                                                                       if k.startswith("images")}
    stage = json.loads((out / "manifest.json").read_text())["stages"]["generate"]
    assert stage["generated_now"] == 0 and stage["planned_batch_size"] == 4


def test_verify_advises_the_select_command_that_resumes_a_killed_select(tmp_path, monkeypatch, capsys, suite,
                                                                        probed_mini):
    # before: "rerun the same command (`t2i-audit run --config SEL/run.yaml --out SEL`)": every seed in full
    out = tmp_path / "sel"
    code, _, err = _cli(_select(suite, probed_mini, "--at", "0.5", "--out", out), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["stages"]["generate"]["status"] = "running"  # what a kill during the finish leaves
    (out / "manifest.json").write_text(json.dumps(manifest))
    first = sorted((out / "images").rglob("*.png"))[0]
    original = first.read_bytes()
    first.unlink()
    code, report, _ = _cli(["verify", out], tmp_path, monkeypatch, capsys)
    assert code == 1 and "run --config" not in report, report
    advice = [line for line in report.splitlines() if line.strip().startswith(("images:", "stages:"))]
    assert len(advice) == 2 and all("`t2i-audit select --from " in line for line in advice), report
    command = advice[0].split("`")[1]
    assert command.endswith(f"--out {out}") and "--at 0.5" in command and "--of 2" in command
    # the advice, run from another folder, resumes the select: the image is made again, verify is clean
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, _, err = _cli(shlex.split(command)[1:] + ["--quiet"], elsewhere, monkeypatch, capsys)
    assert code == 0, err
    assert first.read_bytes() == original
    code, report, _ = _cli(["verify", out], tmp_path, monkeypatch, capsys)
    assert code == 0, report
    assert not (elsewhere / "runs").exists()


def test_a_missing_from_run_is_named_as_such(tmp_path, monkeypatch, capsys, suite):
    # before: "nope: the run does not record its model; pass --model"
    for argv in (["select", "--from", "nope", "--prompts", suite],
                 ["select", "--from", "nope", "--prompts", suite, "--model", "mini"],
                 ["predict", "--from", "nope", "--prompts", suite, "--model", "mini", "--early"]):
        before = _snapshot(tmp_path)
        code, _, err = _cli(argv, tmp_path, monkeypatch, capsys)
        _refused(code, err, ["--from nope: folder does not exist"])
        assert "pass --model" not in err and _snapshot(tmp_path) == before
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    code, _, err = _cli(["select", "--from", "notes", "--prompts", suite], tmp_path, monkeypatch, capsys)
    _refused(code, err, ["--from notes: not a t2i-audit run"])
    assert "pass --model" not in err


def test_run_names_and_identity_follow_the_prompts_content(tmp_path, monkeypatch, capsys, suite):
    """Two spellings of one suite resume one run folder; `--out` with other settings is refused by name."""
    argv = ["run", "--model", "mini", "--prompts", suite, "--limit", "2", "--stages", "prompts", "--out", "r", "-q"]
    code, _, err = _cli(argv, tmp_path, monkeypatch, capsys)
    assert code == 0, err
    spelled = argv[:4] + [suite.replace("/prompts/", "/prompts/./")] + argv[5:]
    code, _, err = _cli(spelled, tmp_path, monkeypatch, capsys)  # same prompts: resumes
    assert code == 0, err
    before = _snapshot(tmp_path / "r")
    code, _, err = _cli(argv + ["--steps", "3", "--seed", "4"], tmp_path, monkeypatch, capsys)
    _refused(code, err, ["r: made by `t2i-audit run` with other settings", "seed: 0 → 4", "steps: 20 → 3"])
    assert _snapshot(tmp_path / "r") == before
    code, _, err = _cli(argv + ["-n", "2"], tmp_path, monkeypatch, capsys)  # more samples extend a run, as before
    assert code == 0, err


def test_the_resume_command_names_a_shipped_suite_by_name_and_a_file_by_its_absolute_path(tmp_path, monkeypatch):
    # before: `select --prompts mini` was advised as `--prompts <cwd>/mini`, a file that does not exist
    from t2i_audit.select.command import resume_argv

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("")
    cfg = api.make_config(dict(model="mini", prompts=["mini", "mine.yaml"], seed=3, batch_size=4))
    argv = resume_argv(cfg, Path("r1"), ["--budget", "40"])
    at = [i for i, a in enumerate(argv) if a == "--prompts"]
    assert [argv[i + 1] for i in at] == ["mini", str(tmp_path / "mine.yaml")]
    assert argv[argv.index("--from") + 1] == str(tmp_path / "r1") and argv[-6:] == [
        "--budget", "40", "--seed", "3", "--batch-size", "4"]
