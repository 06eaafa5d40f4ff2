"""What a newcomer reads first: every option and argument of every command says what it does (walked over the
commands the Typer app registers, sub-apps included, so a command added later is held to it too), and
``--version`` answers with the package's version."""

from __future__ import annotations

import re
from pathlib import Path

import click
import typer
from typer.testing import CliRunner

from t2i_audit import cli


def _params_without_help() -> list[str]:
    missing = []

    def walk(cmd, path):
        for p in cmd.params:
            if isinstance(p, click.Option) and p.name == "help":
                continue
            if not (getattr(p, "help", None) or "").strip():
                missing.append(f"{' '.join(path) or 't2i-audit'}: {'/'.join(p.opts)}")
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(cli.app), [])
    return missing


def test_every_option_and_argument_has_help():
    assert _params_without_help() == []


def test_version_is_the_package_version():
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    (version,) = re.findall(r'(?m)^version = "([^"]+)"', pyproject)
    out = CliRunner().invoke(cli.app, ["--version"])
    assert out.exit_code == 0, out.output
    assert out.output.strip() == f"t2i-audit {version}"
    assert re.search(r"--version\s", CliRunner().invoke(cli.app, ["--help"]).output)
