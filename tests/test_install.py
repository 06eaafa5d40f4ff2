"""The install fits a lab's environment: ranges in pyproject, exact versions in constraints.txt,
optional parts behind extras whose absence is reported by name. Parses files only (no pip runs)."""

from __future__ import annotations

import gzip
import re
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from t2i_audit import extras
from t2i_audit.errors import AuditError

tomllib = pytest.importorskip("tomllib")

# each release of these pins one torch release: in the core they would replace a lab's torch
TORCH_REPLACING = {"torchvision", "open-clip-torch", "timm"}


@pytest.fixture(scope="module")
def project(repo_root):
    return tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def constraints(repo_root) -> dict[str, str]:
    pins = {}
    for line in (repo_root / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def _extra_requirements(project) -> list[Requirement]:
    return [Requirement(r) for reqs in project["optional-dependencies"].values() for r in reqs]


# ------------------------------------------------------------------ the optional-import helper


def test_missing_optional_module_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)  # makes `import open_clip` fail as if absent
    with pytest.raises(AuditError) as e:
        extras.require("open_clip")
    assert str(e.value).startswith("open_clip_torch is not installed: pip install 't2i-audit[open-clip]'")
    with pytest.raises(AuditError, match=re.escape("pip install 't2i-audit[open-clip]'")):
        from t2i_audit.extras import open_clip  # noqa: F401  (the form the scorers use)
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(AuditError, match=re.escape("torchvision is not installed: pip install 't2i-audit[vlm]'")):
        extras.require("torchvision")


def test_explicit_extra_and_present_module():
    with pytest.raises(AuditError, match=re.escape("no_such_pkg_x is not installed: pip install 't2i-audit[detect]'")):
        extras.require("no_such_pkg_x", extra="detect")
    assert extras.require("json").dumps([1]) == "[1]"
    with pytest.raises(AttributeError):
        extras.not_an_optional_module


def test_broken_install_is_not_reported_as_missing(tmp_path, monkeypatch):
    # an installed package whose own import fails: installing the extra again would not help
    (tmp_path / "brokenpkg_t2i.py").write_text("import missing_inner_dep_t2i\n")
    (tmp_path / "badvision_t2i.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(AuditError, match="brokenpkg_t2i is installed but cannot be imported: "
                                         "No module named 'missing_inner_dep_t2i'"):
        extras.require("brokenpkg_t2i", extra="open-clip")
    with pytest.raises(AuditError, match="torchvision::nms does not exist.*build made for the installed torch"):
        extras.require("badvision_t2i", extra="vlm")


def test_auto_processor_names_vlm_extra_when_torchvision_is_missing(monkeypatch):
    import transformers

    def needs_torchvision(*a, **k):
        raise ImportError("\nQwen2VLVideoProcessor requires the Torchvision library but it was not found")

    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", needs_torchvision)
    real_find_spec = extras.importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec",
                        lambda name, *a: None if name == "torchvision" else real_find_spec(name, *a))
    with pytest.raises(AuditError) as e:
        extras.auto_processor("org/qwen")
    assert str(e.value) == ("org/qwen: its processor needs torchvision (ImportError: Qwen2VLVideoProcessor "
                            "requires the Torchvision library but it was not found) torchvision is not "
                            "installed: pip install 't2i-audit[vlm]' (or pip install torchvision)")
    # with torchvision present the library's own error is not disguised
    monkeypatch.setattr(extras.importlib.util, "find_spec", lambda name, *a: object())
    with pytest.raises(ImportError):
        extras.auto_processor("org/qwen")


def test_every_extra_named_in_messages_exists(project):
    declared = set(project["optional-dependencies"])
    assert {extra for _, extra in extras.OPTIONAL.values()} | {"vlm"} <= declared
    # pip 26.3 ignores `t2i-audit[open_clip]` typed by a user: the metadata spells it open-clip
    assert all(name == canonicalize_name(name) for name in declared), sorted(declared)
    dev = {canonicalize_name(r.name): r.extras for r in map(Requirement, project["optional-dependencies"]["dev"])}
    assert dev["t2i-audit"] == declared - {"dev"}, "[dev] must be every extra"


# ------------------------------------------------------------------ ranges and exact versions


def test_core_dependencies_are_ranges_without_torch_replacers(project):
    reqs = [Requirement(r) for r in project["dependencies"]]
    for r in reqs:
        ops = {s.operator for s in r.specifier}
        assert ops and ops <= {">=", ">", "<", "<=", "!="}, f"{r}: a range with a lower bound, not a pin"
        assert ">=" in ops or ">" in ops, f"{r}: needs a lower bound"
    names = {canonicalize_name(r.name) for r in reqs}
    assert not names & TORCH_REPLACING
    # tokenizers of T5 / PixArt-Sigma load from spiece.model
    assert {"torch", "diffusers", "transformers", "sentencepiece", "protobuf"} <= names
    assert not any(op == "==" for r in _extra_requirements(project) for op in (s.operator for s in r.specifier))


def test_constraints_pin_every_dependency_inside_its_range(project, constraints):
    for r in [Requirement(x) for x in project["dependencies"]] + _extra_requirements(project):
        name = canonicalize_name(r.name)
        if name == "t2i-audit":
            continue
        assert name in constraints, f"constraints.txt does not pin {r.name}"
        assert r.specifier.contains(constraints[name], prereleases=True), \
            f"constraints.txt pins {r.name}=={constraints[name]}, outside pyproject's {r}"
    assert "t2i-audit" not in constraints
    assert constraints["torch"] == "2.14.1" and constraints["torchvision"] == "0.29.1"  # the pair that works


def test_readme_and_ci_install_with_the_constraints(repo_root):
    readme = (repo_root / "README.md").read_text()
    # the set-up blocks are the ones marked `<!-- readme-test: ci (…) -->`: the README test leaves them to .ci/run
    blocks = re.findall(r"(?m)^<!--\s*readme-test:\s*ci\b[^\n]*-->\s*\n```bash\n(.*?)```", readme, flags=re.S)
    assert len(blocks) == 2, "the README keeps exactly two set-up commands"
    install, test = (b.strip() for b in blocks)
    assert install.endswith('pip install -e ".[dev]" -c constraints.txt')
    ci = (repo_root / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[dev]" -c constraints.txt' in ci and "rm -rf .ci/venv" in ci
    assert f"\n{test}\n" in ci  # the README's test command


# ------------------------------------------------------------------ the vendored CLIP vocabulary


def test_tiny_tokenizers_build_without_open_clip(monkeypatch):
    from t2i_audit import tiny
    from t2i_audit.mini import tokenizer as mini_tok

    monkeypatch.setitem(sys.modules, "open_clip", None)
    monkeypatch.setitem(sys.modules, "open_clip.tokenizer", None)
    vocab, merges = tiny.clip_vocab_merges(2)
    assert merges == [("i", "n"), ("t", "h")]  # the first two merges of CLIP's BPE
    assert vocab["!"] == 0 and vocab["in"] == 512 and len(vocab) == 512 + 2 + 2
    assert len(mini_tok._full_merges.__wrapped__()) == 49152 - 256 - 2


def test_vendored_bpe_is_open_clips_file():
    open_clip = pytest.importorskip("open_clip")
    from open_clip.tokenizer import bytes_to_unicode, default_bpe

    from t2i_audit.clip_bpe import BPE_PATH, bytes_to_unicode as ours

    assert BPE_PATH.read_bytes() == open(default_bpe(), "rb").read()
    assert gzip.open(BPE_PATH).read().decode("utf-8").startswith("\"bpe_simple_vocab_16e6.txt#version: 0.2\n")
    assert ours() == bytes_to_unicode()
