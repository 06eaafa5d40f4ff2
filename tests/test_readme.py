"""Every command in the README is a test (issue 37): each ``bash`` and ``python`` block of README.md runs, in page
order, offline, in one folder that starts empty — as a newcomer copies them into a terminal — so the README can
never again show a command that fails. Blocks added by anyone later are tested too: nothing here names a block.

One rule makes the real-model blocks run on a laptop (the README states it, "Every command in this README is a
test"): a model that needs downloaded weights becomes the tiny random-weight twin of its family (a card: by its
pipeline's family; an ``hf:`` id or a local folder: ``tiny-sd``), and every ``run`` / ``select`` / ``predict`` (and
``limit=`` in Python) takes ``--limit 4`` and at most ``-n 2``. A block right after
``<!-- readme-test: skip (why) -->`` is reported as skipped with that reason; ``<!-- readme-test: ci (why) -->``
marks the set-up commands that ``.ci/run`` runs itself (tests/test_install.py checks they are the same).

Beside the blocks: the README's command table names every registered command, its scorer table every registered
scorer, and the quickstart's expected headline is the shipped example's (reports/mini, made by the same command).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import t2i_audit

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
LANGS = {"bash": "bash", "sh": "bash", "shell": "bash", "console": "bash", "python": "python", "py": "python"}
MARK = re.compile(r"(?m)^<!--\s*readme-test:\s*(\w+)\s*\((.+)\)\s*-->\s*$")  # a line of its own
LIMIT, MAX_N = 4, 2
TIMEOUT = 600


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence
    lang: str  # bash | python
    code: str
    mark: str | None  # skip | ci
    reason: str | None


def readme_blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```\s*([\w-]*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("```")), len(lines))
        lang = LANGS.get(fence.group(1).lower())
        if lang:
            prev = next((line for line in reversed(lines[:i]) if line.strip()), "")
            mark = MARK.search(prev)
            out.append(Block(i + 1, lang, "\n".join(lines[i + 1:j]), mark and mark.group(1), mark and mark.group(2)))
        i = j + 1
    return out


BLOCKS = readme_blocks(README.read_text()) if README.exists() else []


# ------------------------------------------------------------------ the one rule


def tiny_twins() -> dict[str, str]:
    """Card name → the tiny twin of its family (models.yaml pipeline → families.yaml family → tiny card). Cards
    shipped inside the package (``mini``) need no download and stay."""
    from t2i_audit.families import pipeline_family
    from t2i_audit.models import _cards, _tiny_cards

    by_family: dict[str, str] = {}
    for name, spec in sorted(_tiny_cards().items()):
        by_family.setdefault(spec["family"], name)
    return {name: by_family[pipeline_family(spec["pipeline"])["family"]]
            for name, spec in _cards().items() if "package" not in spec}


def _substitute_models(code: str, twins: dict[str, str]) -> str:
    code = re.sub(r"(--model[ =])(hf:\S+|\.{0,2}/\S+|~/\S+)", r"\1tiny-sd", code)  # an hf: id, a local folder
    code = re.sub(r"""(model=["'])(hf:[^"']+|\.{0,2}/[^"']+)(["'])""", r"\1tiny-sd\3", code)
    for name in sorted(twins, key=len, reverse=True):  # sd-3.5-medium before sd-3 …
        code = re.sub(rf"(?<![\w.-]){re.escape(name)}(?=$|[\s_\"'/*,)])", twins[name], code, flags=re.M)
    return code


def _small_command(command: str) -> str:
    """One shell command: ``run`` / ``select`` / ``predict`` get --limit 4 and at most -n 2."""
    if not re.search(r"(t2i-audit|-m t2i_audit)\s+(run|select|predict)\b", command):
        return command
    command = re.sub(r"(?<=\s)(-n|--images-per-prompt)(\s+)(\d+)", lambda m: f"{m[1]}{m[2]}{min(int(m[3]), MAX_N)}",
                     command)
    if re.search(r"\s--limit\s+\d+", command):
        return re.sub(r"(\s--limit\s+)\d+", rf"\g<1>{LIMIT}", command)
    body, sep, comment = command.partition("  #")
    return f"{body.rstrip()} --limit {LIMIT}" + (f"  {sep.strip()}{comment}" if sep else "")


def apply_rule(block: Block, twins: dict[str, str]) -> str:
    code = _substitute_models(block.code, twins)
    if block.lang == "python":
        code = re.sub(r"\blimit\s*=\s*\d+", f"limit={LIMIT}", code)
        return re.sub(r"\bimages_per_prompt\s*=\s*(\d+)", lambda m: f"images_per_prompt={min(int(m[1]), MAX_N)}",
                      code)
    joined = re.sub(r"\\\n\s*", " ", code)  # continuation lines: one command a line
    return "\n".join(_small_command(line) for line in joined.splitlines())


def test_the_rule_on_examples():
    twins = {"sd-xl": "tiny-sdxl", "flux-schnell": "tiny-flux"}
    b = Block(1, "bash", "t2i-audit run --model sd-xl --prompts colors -n 8\n"
                         "t2i-audit compare runs/sd-xl_colors_* runs/flux-schnell_colors_* --out x\n"
                         "t2i-audit run --model hf:org/repo@main --prompts spatial --limit 40  # a comment\n"
                         "t2i-audit prompts show spatial --limit 3", None, None)
    assert apply_rule(b, twins).splitlines() == [
        "t2i-audit run --model tiny-sdxl --prompts colors -n 2 --limit 4",
        "t2i-audit compare runs/tiny-sdxl_colors_* runs/tiny-flux_colors_* --out x",
        "t2i-audit run --model tiny-sd --prompts spatial --limit 4  # a comment",
        "t2i-audit prompts show spatial --limit 3"]
    py = Block(1, "python", 'api.RunConfig(model="sd-xl", prompts=["colors"], limit=100)', None, None)
    assert apply_rule(py, twins) == 'api.RunConfig(model="tiny-sdxl", prompts=["colors"], limit=4)'
    assert tiny_twins()["sd-xl"] == "tiny-sdxl" and "mini" not in tiny_twins()


# ------------------------------------------------------------------ running the blocks in page order


PLAIN = re.compile(r"^t2i-audit(\s|$)")
PYTHON_C = re.compile(r"^python3? -c\s")
SHELL_SYNTAX = re.compile(r"[;&|<>`$(){}]|\\$")


def _plain_commands(code: str, cwd: Path) -> list[list[str] | str] | None:
    """A bash block made only of ``t2i-audit …`` lines (comments aside) as argument lists, globs expanded as bash
    expands them (sorted; a pattern that matches nothing stays as written), and of ``python -c CODE`` lines as their
    CODE; None when a line needs the shell."""
    import glob
    import shlex

    out: list[list[str] | str] = []
    for line in code.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if PYTHON_C.match(line):
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)
            # one command (no shell operator split it off), its code taken as written: nothing bash would expand
            if len(words) != 3 or any(c in words[2] for c in "$`\\"):
                return None
            out.append(words[2])
            continue
        words = shlex.split(line, comments=True)
        if not PLAIN.match(line) or SHELL_SYNTAX.search(" ".join(words)):
            return None
        argv = []
        for w in words[1:]:
            hits = sorted(glob.glob(w, root_dir=cwd)) if any(c in w for c in "*?[") else []
            argv += hits or [w]
        out.append(argv)
    return out


def test_plain_blocks_take_python_c_lines_and_nothing_the_shell_must_read(tmp_path):
    code = """python -c "from x import y; y('a')"\nt2i-audit run --model mini  # note\npython3 -c 'print(1)'"""
    assert _plain_commands(code, tmp_path) == ["from x import y; y('a')", ["run", "--model", "mini"], "print(1)"]
    for shell in ('python -c "print(1)" && ls', 'python -c "print($HOME)"', "python -c 'a' 'b'", 'python -c "a" > f',
                  "t2i-audit run | tee log"):
        assert _plain_commands(shell, tmp_path) is None, shell


class Reader:
    """One newcomer's terminal: a folder that starts empty and the offline environment of the tests. Blocks run in
    page order; a block run alone (pytest -k, another xdist worker) first replays the blocks before it.

    A block of plain ``t2i-audit …`` lines runs each line through the real entry point (``t2i_audit.cli.main``, as
    the console script does) in this process, so the suite pays torch's import once, not once a line; a Python block,
    and a ``python -c CODE`` line of such a block, runs as a script in this process; any other bash block runs in
    bash with ``t2i-audit`` and ``python`` on PATH (this interpreter and the t2i_audit it imports)."""

    def __init__(self, root: Path):
        self.cwd = root / "reader"
        self.cwd.mkdir()
        shims = root / "bin"
        shims.mkdir()
        for name, cmd in (("t2i-audit", f'exec "{sys.executable}" -m t2i_audit "$@"'),
                          ("python", f'exec "{sys.executable}" "$@"')):
            (shims / name).write_text(f"#!/bin/sh\n{cmd}\n")
            (shims / name).chmod(0o755)
        package_root = str(Path(t2i_audit.__file__).resolve().parents[1])
        self.env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}",
                    "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p),
                    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        self.done: set[int] = set()
        self.twins = tiny_twins()

    def run(self, block: Block) -> tuple[int, str]:
        """(exit status, what the reader saw)."""
        code = apply_rule(block, self.twins)
        self.done.add(block.line)
        plain = _plain_commands(code, self.cwd) if block.lang == "bash" else None
        if block.lang == "bash" and plain is None:
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=self.cwd, env=self.env,
                               capture_output=True, text=True, timeout=TIMEOUT)
            return r.returncode, r.stdout + r.stderr
        return self._in_process(code, plain)

    def _in_process(self, code: str, commands: list[list[str] | str] | None) -> tuple[int, str]:
        import contextlib
        import io
        import traceback

        from t2i_audit import cli

        seen, here, argv = io.StringIO(), Path.cwd(), sys.argv
        os.chdir(self.cwd)
        try:
            with contextlib.redirect_stdout(seen), contextlib.redirect_stderr(seen):
                for args in commands if commands is not None else [code]:
                    if isinstance(args, str):  # a Python block or a `python -c` line: a script in the reader's folder
                        sys.argv = ["-c"]
                        try:
                            exec(compile(args, "README.md", "exec"), {"__name__": "__main__"})
                        except Exception:
                            traceback.print_exc()
                            return 1, seen.getvalue()
                        continue
                    sys.argv = ["t2i-audit", *args]
                    try:
                        cli.main()
                        code_ = 0
                    except SystemExit as e:
                        code_ = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                    if code_:
                        return code_, seen.getvalue()
        finally:
            os.chdir(here)
            sys.argv = argv
        return 0, seen.getvalue()


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> Reader:
    return Reader(tmp_path_factory.mktemp("readme"))


def _runnable(b: Block) -> bool:
    return b.mark is None


@pytest.mark.parametrize("block", BLOCKS, ids=[f"README.md:{b.line}" for b in BLOCKS])
def test_readme_block_runs(block: Block, reader: Reader):
    if block.mark == "skip":
        pytest.skip(f"readme-test: skip ({block.reason})")
    if block.mark == "ci":
        pytest.skip(f"readme-test: ci ({block.reason})")
    for earlier in BLOCKS:
        if earlier.line >= block.line:
            break
        if _runnable(earlier) and earlier.line not in reader.done:
            status, seen = reader.run(earlier)
            assert status == 0, f"README.md:{earlier.line} (needed by :{block.line}) failed:\n{seen[-3000:]}"
    status, seen = reader.run(block)
    assert status == 0, f"README.md:{block.line} as run (rule applied):\n{apply_rule(block, reader.twins)}\n{seen[-5000:]}"
    assert "Traceback" not in seen, seen[-3000:]


def test_every_mark_is_known_and_says_why():
    text = README.read_text()
    marks = MARK.findall(text)
    assert len(marks) == len(re.findall(r"(?m)^<!--\s*readme-test", text)), "a readme-test line the test cannot read"
    assert all(kind in ("skip", "ci") and why.strip() for kind, why in marks)
    marked = [b for b in BLOCKS if b.mark]
    assert len(marked) == len(marks), "a readme-test comment that is not right before a bash/python block"
    assert sum(b.mark is None for b in BLOCKS) >= 8, "most of the README's blocks run"


# ------------------------------------------------------------------ the tables the README keeps


def _section(title: str) -> str:
    text = README.read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_first_screen_is_install_quickstart_commands():
    assert re.findall(r"(?m)^## (.+)$", README.read_text())[:3] == ["Install", "Quickstart", "Commands"]


def test_the_command_table_names_every_command():
    """Every command the Typer app registers (sub-apps included) has a row; ``board`` and ``track`` are listed for
    the branches that add them."""
    import typer

    from t2i_audit import cli

    names: set[str] = set()

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs is None:
            names.add(" ".join(path))
        for name, sub in (subs or {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(cli.app), [])
    listed: set[str] = set()
    for row in re.findall(r"(?m)^\| (`t2i-audit [^|]+?`(?:, `[^`]+`)*) \|", _section("Commands")):
        first, *more = re.findall(r"`([^`]+)`", row)
        words = first.split()[1:]
        listed.add(" ".join(words))
        listed.update(" ".join([*words[:-1], m]) for m in more)
    assert names <= listed, f"commands without a row in the README's command table: {sorted(names - listed)}"
    assert {"board", "track"} <= listed


def test_the_scorer_table_names_every_registered_scorer():
    from t2i_audit.scorers.registry import load_cards

    rows = re.findall(r"(?m)^\| (`[^|]+`) \|", _section("Scorers"))
    listed = {name for row in rows for name in re.findall(r"`([^`]+)`", row)}
    missing = {n for n in load_cards() if n not in listed and not (n.startswith("tiny-") and "tiny-*" in listed)}
    assert not missing, f"scorers missing from the README's scorer table: {sorted(missing)}"


def test_the_quickstarts_expected_headline_is_the_shipped_examples():
    """The README's expected headline is what `run` prints for the shipped example (reports/make_mini.sh runs the
    quickstart's command into reports/mini)."""
    import json

    from t2i_audit.report.headline import headline_text

    stated = re.findall(r"(?m)^headline: (.+)$", _section("Quickstart"))
    summary = json.loads((REPO / "reports" / "mini" / "summary.json").read_text())["report"]
    assert stated == [headline_text(summary)]


def test_readme_links_to_files_that_exist():
    for target in re.findall(r"\]\(((?:docs|reports)/[^)#]+)\)", README.read_text()):
        assert (REPO / target).exists(), target
    assert shutil.which("bash"), "the README's blocks are bash"
