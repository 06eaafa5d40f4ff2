"""Shipped suites are named by their bare name from any folder (also a wheel install); a path stays a path."""

from __future__ import annotations

import pytest

from t2i_audit.errors import SuiteError
from t2i_audit.prompts import expand_files
from t2i_audit.suite import SHIPPED_SUITES, load_suite, resolve_suite_path


def test_a_bare_name_is_the_shipped_suite_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_suite_path("mini") == SHIPPED_SUITES / "mini.yaml"
    assert [r["id"] for r in expand_files(["mini"])] == [r["id"] for r in expand_files([SHIPPED_SUITES / "mini.yaml"])]


def test_a_path_is_never_swapped_for_the_shipped_suite(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # never swapped, but the error names the shipped suite that was probably meant (issue 37: a README path
    # `prompts/colors.yaml` copied into an empty folder said only "file not found")
    with pytest.raises(SuiteError, match=r"prompts/mini.yaml: file not found; the shipped suite 'mini' is built in: "
                                         r"pass it by name \(mini\)$"):
        load_suite("prompts/mini.yaml")
    (tmp_path / "mini").write_text("suite: mine\n")  # a file named like a shipped suite is that file
    assert resolve_suite_path("mini") == tmp_path.joinpath("mini").relative_to(tmp_path)


def test_an_unknown_name_lists_the_shipped_suites(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SuiteError, match="nonesuch: file not found .*usable by name: .*colors.*mini"):
        load_suite("nonesuch")


def test_a_path_that_does_not_exist_suggests_the_names_from_the_cli_and_the_api(tmp_path, monkeypatch, capsys):
    """From an empty folder, as a newcomer copies the README: the command and the Python API both answer with the
    shipped names (a glob the shell left unexpanded too), exit 2 and no traceback on the command line."""
    import sys

    from t2i_audit import api, cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["t2i-audit", "prompts", "validate", "prompts/*.yaml"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "usable by name: actions, colors" in err and "Traceback" not in err, err
    with pytest.raises(SuiteError, match="pass it by name \\(colors\\)"):
        api.expand_suites(["prompts/colors.yaml"])
