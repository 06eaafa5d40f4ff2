"""The wheel a user installs holds every data file the package reads at run time.

The files are found from the code, not listed by hand: every path a module builds from its own
``__file__`` (``Path(__file__).parent / "templates"``, ``PACKAGE_DIR / "cards" / "scorers"``, a
``.glob("*.yaml")`` of such a folder, names imported from another module included), plus the
package paths the shipped cards name (``pkg:…`` in scorer cards, ``package:`` in models.yaml, which
the registries resolve inside the package). The wheel is built from the working tree with
setuptools (``pip wheel --no-deps --no-build-isolation``), as a user's ``pip install .`` builds it.
Before cards/scorers/*.yaml were package data, the installed ``t2i-audit scorers`` listed nothing.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "t2i_audit"
pytestmark = pytest.mark.skipif(not (PKG / "__init__.py").is_file() or not (REPO / "pyproject.toml").is_file(),
                                reason="needs the source tree (this run tests an installed package)")

# Reads from outside the package: a wheel cannot hold them (none today; an entry here marks a known one).
OUTSIDE = {
}

PATH_OPS = {"parent", "parents", "with_name", "resolve", "absolute", "glob", "rglob"}


# ------------------------------------------------------------------ paths built from __file__


def _module_name(py: Path) -> str:
    parts = list(py.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


class _Paths:
    """Evaluates the path expressions of one module; collects the paths it reads."""

    def __init__(self, py: Path, env: dict):
        self.py, self.env = py, env
        self.reads: list[tuple[Path, str | None]] = []  # (path, glob pattern or None)

    def value(self, node):
        """The Path an expression evaluates to, or None when it is not one built from __file__."""
        if isinstance(node, ast.Name):
            return self.py if node.id == "__file__" else self.env.get(node.id)
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name == "Path" and len(node.args) == 1:
                return self.value(node.args[0])
            if isinstance(f, ast.Attribute):
                base = self.value(f.value)
                if base is not None and f.attr in ("resolve", "absolute"):
                    return base
                if base is not None and f.attr == "with_name" and _const(node.args):
                    return base.with_name(_const(node.args))
            return None
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            base = self.value(node.value)
            return base.parent if base is not None else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
            base = self.value(node.value.value)
            i = node.slice.value if isinstance(node.slice, ast.Constant) else None
            return base.parents[i] if base is not None and isinstance(i, int) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            base = self.value(node.left)
            if base is not None and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str):
                return base / node.right.value
        return None

    def scan(self, tree: ast.Module) -> None:
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
            v = self.value(node.value)
            if v is not None:
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.env[t.id] = v
        for node in ast.walk(tree):
            v = self.value(node) if isinstance(node, ast.expr) else None
            if v is None:
                continue
            up = parents.get(node)
            if isinstance(up, ast.Attribute) and up.attr in ("glob", "rglob") and isinstance(parents.get(up), ast.Call):
                self.reads.append((v, _const(parents[up].args) or "*"))
            elif not _builds_on(node, up):
                self.reads.append((v, None))


def _const(args) -> str | None:
    return args[0].value if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) else None


def _builds_on(node, up) -> bool:
    """True when ``up`` only builds another path from ``node`` (or binds it to a name): not a read."""
    if isinstance(up, ast.Assign):
        return True
    if isinstance(up, ast.BinOp) and up.left is node:
        return True
    if isinstance(up, ast.Attribute) and up.attr in PATH_OPS:
        return True
    if isinstance(up, ast.Subscript) and up.value is node:
        return True
    return isinstance(up, ast.Call) and getattr(up.func, "id", getattr(up.func, "attr", None)) == "Path"


def code_reads() -> dict[str, list[tuple[Path, str | None]]]:
    """Module file (repo-relative) → the paths it reads, built from a __file__ (its own or an imported one)."""
    files = sorted(PKG.rglob("*.py"))
    trees = {py: ast.parse(py.read_text(), str(py)) for py in files}
    envs: dict[str, dict] = {_module_name(py): {} for py in files}
    out = {}
    for _ in range(2):  # the second pass sees the constants other modules export
        for py, tree in trees.items():
            mod = _module_name(py)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level:
                    package = mod.split(".") if py.name == "__init__.py" else mod.split(".")[:-1]
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                    for alias in node.names:
                        if alias.name in envs.get(base, {}):
                            envs[mod][alias.asname or alias.name] = envs[base][alias.name]
            p = _Paths(py, envs[mod])
            p.scan(tree)
            out[py.relative_to(REPO).as_posix()] = p.reads
    return out


def card_reads() -> list[Path]:
    """Package paths named by the shipped cards: ``pkg:`` values (scorer registry) and ``package:`` keys
    (models.yaml), both resolved inside the package by the code that reads them."""
    out = []
    for f in sorted(PKG.rglob("*.yaml")):
        text = f.read_text()
        body = "\n".join(line.split("#", 1)[0] for line in text.splitlines())  # not the comments' examples
        out += [PKG / m for m in re.findall(r"pkg:([\w./-]+)", body)]

        def walk(node):
            if isinstance(node, dict):
                for k, v in node.items():
                    if k == "package" and isinstance(v, str):
                        out.append(PKG / v)
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        walk(yaml.safe_load(text))
    return out


def _files(path: Path, pattern: str | None) -> list[Path]:
    if pattern:
        return sorted(p for p in path.glob(pattern) if p.is_file())
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return [path]


# ------------------------------------------------------------------ the built wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> set[str]:
    """Names in a wheel built from a copy of the working tree (a stale build/ folder cannot leak into it)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(PKG, src / "t2i_audit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PIP_NO_INDEX": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = (tmp / "dist").glob("t2i_audit-*.whl")
    return set(zipfile.ZipFile(whl).namelist())


READS = code_reads()


def test_the_scan_finds_the_known_data():
    """The scan sees the reads this test was written against (a scan that finds nothing would pass anything)."""
    found = {p.relative_to(REPO).as_posix() for reads in READS.values() for p, _ in reads if p.is_relative_to(REPO)}
    for rel in ("t2i_audit/models.yaml", "t2i_audit/families.yaml", "t2i_audit/cards/protocols.yaml",
                "t2i_audit/cards/questioners.yaml", "t2i_audit/cards/scorers", "t2i_audit/report/templates",
                "t2i_audit/report/static/report.css", "t2i_audit/data/bpe_simple_vocab_16e6.txt.gz"):
        assert rel in found, rel
    assert PKG / "mini/weights/judge/model.safetensors" in card_reads()
    assert PKG / "mini/weights/generator" in card_reads()


@pytest.mark.parametrize("module", sorted(m for m, reads in READS.items() if reads))
def test_every_file_the_code_reads_is_in_the_wheel(module, wheel, request):
    outside = [p for p, _ in READS[module] if not p.is_relative_to(PKG)]
    if module in OUTSIDE:
        request.applymarker(pytest.mark.xfail(strict=True, reason=OUTSIDE[module]))
    assert not outside, f"{module} reads {sorted(map(str, outside))}, outside the package: no wheel holds it"
    missing = [f.relative_to(REPO).as_posix() for p, pattern in READS[module] for f in _files(p, pattern)
               if f.relative_to(REPO).as_posix() not in wheel]
    assert not missing, f"{module} reads files the wheel lacks: {missing}"
    assert all(_files(p, pattern) for p, pattern in READS[module]), f"{module}: a path it reads matches no file"


def test_every_package_path_the_cards_name_is_in_the_wheel(wheel):
    reads = card_reads()
    files = [f for p in reads for f in _files(p, None)]
    assert reads and all(_files(p, None) for p in reads)
    missing = [f.relative_to(REPO).as_posix() for f in files if f.relative_to(REPO).as_posix() not in wheel]
    assert not missing, missing
