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
    with pytest.raises(SuiteError, match=r"prompts/mini.yaml: file not found$"):
        load_suite("prompts/mini.yaml")
    (tmp_path / "mini").write_text("suite: mine\n")  # a file named like a shipped suite is that file
    assert resolve_suite_path("mini") == tmp_path.joinpath("mini").relative_to(tmp_path)


def test_an_unknown_name_lists_the_shipped_suites(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SuiteError, match="nonesuch: file not found .*usable by name: .*colors.*mini"):
        load_suite("nonesuch")
