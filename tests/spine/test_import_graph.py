"""No import circle in t2i_audit/: the module graph (every import, also relative ones and those
inside functions, which run later but still tie the two modules together) is acyclic.

A circle that a function-level import hides still means neither module can be read, tested or
moved without the other; the house rule is none (HELPERS.md, DESIGN.md)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "t2i_audit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]  # a module's relative import starts from its package
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def targets(importer: str, path: Path, known: set[str]) -> set[str]:
    """The t2i_audit modules `importer` imports: a name imported from a package that is itself a
    module (`from . import sweep_eval`) counts as that module; otherwise the package/module named."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(importer, is_package, node)
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `import t2i_audit.x.y as z` of a non-module attribute
                name = name.rpartition(".")[0]
            if name and name != importer:
                out.add(name)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: targets(m, p, known) for m, p in mods.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth ≤ number of modules (a few hundred)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_sees_relative_and_function_level_imports():
    graph = import_graph()
    # relative, at module level: from ..errors import AuditError
    assert "t2i_audit.errors" in graph["t2i_audit.mini.sweep_work"]
    # inside a function: run_sweep's `from .sweep_page import render_page`
    assert "t2i_audit.mini.sweep_page" in graph["t2i_audit.mini.sweep"]


def test_the_circle_finder_finds_a_circle_through_three_modules():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_in_the_package():
    found = circles(import_graph())
    assert not found, "import circles (each a strongly connected set of modules):\n" + "\n".join(
        " ↔ ".join(c) for c in found)


@pytest.mark.parametrize("known", [set(modules())])
def test_every_module_parses(known):
    assert "t2i_audit.mini.sweep" in known and "t2i_audit" in known
