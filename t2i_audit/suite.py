"""Prompt-suite schema, strict loading and validation with file / key path / line.

The YAML is parsed into nodes first so that every value keeps its line; duplicate keys (which
PyYAML would silently overwrite) are errors. The shape is checked by pydantic (unknown keys
forbidden); cross-references (concept names, slots, placeholders, constraints, expectations,
twins) are checked here. All problems are collected and raised together as a SuiteError.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import AuditError, SuiteError
from .safeload import compose_yaml, construct_yaml

# The shipped suites (the repository's top-level prompts/, reached through the t2i_audit/suites link so
# that the wheel carries them as package data): an installed t2i-audit has them without a checkout.
SHIPPED_SUITES = Path(__file__).resolve().parent / "suites"


def shipped_suite_names() -> list[str]:
    return sorted(p.stem for p in SHIPPED_SUITES.glob("*.yaml"))


def shipped_hint(path: str | Path) -> str:
    """What to say after "file not found" for a suite: the shipped suite of the same name, usable from any folder
    (``prompts/colors.yaml`` outside a checkout → ``colors``), else the names there are."""
    stem = Path(path).stem if Path(path).suffix in ("", ".yaml", ".yml") else None
    if stem in shipped_suite_names() and Path(path).name != stem:
        return f"; the shipped suite {stem!r} is built in: pass it by name ({stem})"
    return f" (shipped suites, usable by name: {', '.join(shipped_suite_names())}; from any folder)"


def resolve_suite_path(path: str | Path) -> Path:
    """A suite file as given, or a shipped suite named by its bare name (``mini``, ``colors``).

    Only a bare name that is not itself a file is looked up: a path is never silently swapped for
    another file, so ``prompts/mini.yaml`` means that file (from a checkout) and ``mini`` the shipped one
    (from anywhere, also a wheel install)."""
    p = Path(path)
    if p.exists() or p.suffix or len(p.parts) != 1:
        return p
    shipped = SHIPPED_SUITES / f"{p.name}.yaml"
    return shipped if shipped.is_file() else p

ATTRIBUTE_FAMILIES = ("color", "shape", "texture", "material", "size")
RELATION_FAMILIES = ("spatial", "action")
FAMILIES = ("object", *ATTRIBUTE_FAMILIES, *RELATION_FAMILIES, "count")
MAX_COMBINATIONS = 2_000_000  # per template, before constraints: beyond this, sample smaller lists

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_]+))?\}")
PLACEHOLDER_FIELDS = ("name", "text", "a", "plural", "number")
CONSTRAINT = re.compile(r"^\s*([A-Za-z_]\w*)\s*(==|!=)\s*(?:([A-Za-z_]\w*)|'([^']*)'|\"([^\"]*)\")\s*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Value(_Strict):
    name: str = Field(min_length=1)
    plural: Optional[str] = None
    text: Optional[str] = None  # the phrase a relation uses in prompts ("to the left of")
    inverse: Optional[str] = None  # name of the relation with arguments swapped
    number: Optional[int] = Field(default=None, ge=0)
    article: Optional[str] = None  # override "a"/"an"


class ConceptList(_Strict):
    family: Literal[FAMILIES]  # type: ignore[valid-type]
    values: list[Union[str, Value]] = Field(min_length=1)

    @field_validator("values")
    @classmethod
    def _as_values(cls, v):
        return [Value(name=x) if isinstance(x, str) else x for x in v]


class ExpectRelation(_Strict):
    slot: str
    subject: str
    object: str


class Expect(_Strict):
    objects: list[dict[str, str]] = Field(min_length=1)
    relations: list[ExpectRelation] = []


class Sample(_Strict):
    max: int = Field(gt=0)
    seed: int = 0


class Template(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_\-]+$")
    category: str = Field(min_length=1)
    text: str = Field(min_length=1)
    slots: dict[str, str] = Field(min_length=1)
    constraints: list[str] = []
    expect: Expect
    twins: list[tuple[str, str]] = []
    sample: Optional[Sample] = None


class Heldout(_Strict):
    bind: tuple[str, str]
    fraction: Optional[float] = Field(default=None, gt=0, lt=1)
    seed: int = 0
    compositions: Optional[list[tuple[str, str]]] = None


class SuiteModel(_Strict):
    suite: str = Field(pattern=r"^[a-z0-9][a-z0-9_\-]*$")
    version: Union[int, str]
    description: str = ""
    concepts: dict[str, ConceptList] = Field(min_length=1)
    templates: list[Template] = Field(min_length=1)
    heldout: Optional[Heldout] = None


class Suite:
    """A validated suite: the model plus where it came from."""

    def __init__(self, model: SuiteModel, path: Path, lines: dict[tuple, int]):
        self.model = model
        self.path = path
        self.lines = lines

    @property
    def name(self) -> str:
        return self.model.suite

    @property
    def version(self) -> str:
        return str(self.model.version)

    def concept(self, list_name: str) -> ConceptList:
        return self.model.concepts[list_name]

    def family_of_slot(self, template: Template, slot: str) -> str:
        return self.model.concepts[template.slots[slot]].family


# --- YAML with lines and duplicate-key detection ------------------------------------------


def _construct(node: yaml.Node, path: tuple, ctx: dict) -> Any:
    """Build Python values from nodes, recording each key path's line and duplicate keys."""
    lines, problems, where = ctx["lines"], ctx["problems"], ctx["where"]
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                problems.append(f"{where}:{key_node.start_mark.line + 1}: {_fmt(path)}: a key must be a plain "
                                f"name, not a {'list' if isinstance(key_node, yaml.SequenceNode) else 'mapping'}")
                continue
            key = key_node.value
            if key in out:
                problems.append(
                    f"{where}:{key_node.start_mark.line + 1}: {_fmt(path + (key,))}: duplicate key "
                    f"(first at line {lines[path + (key,)]})"
                )
                continue
            lines[path + (key,)] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, path + (key,), ctx)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(v, path + (i,), ctx) for i, v in enumerate(node.value)]
    return construct_yaml(node, where)  # safe tags only: !!python/name and its kin name their line


def _fmt(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<root>"


def _line(lines: dict, path: tuple) -> int:
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path, 1)


def load_yaml_with_lines(path: Path) -> tuple[Any, dict[tuple, int], list[str]]:
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError([f"{where}: file not found{shipped_hint(path)}"]) from None
    except UnicodeDecodeError as e:
        raise SuiteError([f"{where}: not UTF-8 text ({e.reason} at byte {e.start})"]) from None
    except IsADirectoryError:
        raise SuiteError([f"{where}: is a directory, expected a .yaml suite file"]) from None
    try:  # bounded: an alias bomb or deep nesting is refused before anything is built
        node = compose_yaml(text, where)
        if node is None:
            raise SuiteError([f"{where}: empty file"])
        ctx = {"lines": {}, "problems": [], "where": where}
        data = _construct(node, (), ctx)
    except SuiteError:
        raise
    except AuditError as e:
        raise SuiteError([str(e)]) from None
    return data, ctx["lines"], ctx["problems"]


# --- validation -------------------------------------------------------------------------


def load_suite(path: str | Path) -> Suite:
    """Load and strictly validate a suite (a path, or a shipped suite's name); raise SuiteError listing
    every problem."""
    path = resolve_suite_path(path)
    where = str(path)
    data, lines, problems = load_yaml_with_lines(path)
    if not isinstance(data, dict):
        raise SuiteError([f"{where}:1: <root>: expected a mapping with keys suite, version, concepts, templates"])
    try:
        model = SuiteModel.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in ("str", "Value")))
            # pydantic names union branches in loc ("str", "Value"); those are not key paths
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown key"
            problems.append(f"{where}:{_line(lines, loc)}: {_fmt(loc)}: {msg}")
        raise SuiteError(_dedupe(problems)) from None
    problems += _check_references(model, lines, where)
    if problems:
        raise SuiteError(_dedupe(problems))
    return Suite(model, path, lines)


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _check_references(m: SuiteModel, lines: dict, where: str) -> list[str]:
    problems: list[str] = []

    def err(path: tuple, msg: str) -> None:
        problems.append(f"{where}:{_line(lines, path)}: {_fmt(path)}: {msg}")

    for cname, clist in m.concepts.items():
        seen = set()
        for i, v in enumerate(clist.values):
            if v.name in seen:
                err(("concepts", cname, "values", i), f"duplicate value {v.name!r}")
            seen.add(v.name)
            if clist.family == "count" and v.number is None:
                err(("concepts", cname, "values", i), "a count value needs 'number'")

    names = [t.name for t in m.templates]
    for ti, t in enumerate(m.templates):
        base = ("templates", ti)
        if names.count(t.name) > 1:
            err(base + ("name",), f"duplicate template name {t.name!r}")
        for slot, cname in t.slots.items():
            if cname not in m.concepts:
                from .errors import did_you_mean

                err(base + ("slots", slot), f"undefined concept list {cname!r}.{did_you_mean(cname, m.concepts)}")
        fam = {s: m.concepts[c].family for s, c in t.slots.items() if c in m.concepts}
        used = set()
        for match in PLACEHOLDER.finditer(t.text):
            slot, field = match.group(1), match.group(2)
            used.add(slot)
            if slot not in t.slots:
                err(base + ("text",), f"placeholder {{{slot}}} has no slot (slots: {', '.join(t.slots)})")
            if field and field not in PLACEHOLDER_FIELDS:
                err(base + ("text",), f"unknown placeholder field .{field} (use {', '.join(PLACEHOLDER_FIELDS)})")
        for slot in t.slots:
            if slot not in used:
                err(base + ("slots", slot), f"slot {slot!r} is never used in the template text")
        for ci, c in enumerate(t.constraints):
            mt = CONSTRAINT.match(c)
            if not mt:
                err(base + ("constraints", ci), f"cannot parse constraint {c!r} (expected 'a != b', 'a == b' or \"a != 'value'\")")
                continue
            for s in (mt.group(1), mt.group(3)):
                if s is not None and s not in t.slots:
                    err(base + ("constraints", ci), f"constraint names unknown slot {s!r}")
        object_ids = []
        for oi, obj in enumerate(t.expect.objects):
            p = base + ("expect", "objects", oi)
            oid = obj.get("id")
            if oid is None:
                err(p, "an expected object needs 'id' (its object slot)")
                continue
            object_ids.append(oid)
            if fam.get(oid) != "object":
                err(p + ("id",), f"{oid!r} is not an object slot")
            for key, slot in obj.items():
                if key == "id":
                    continue
                if key == "count":
                    if fam.get(slot) != "count":
                        err(p + (key,), f"count must name a count slot, got {slot!r}")
                elif key in ATTRIBUTE_FAMILIES:
                    if slot not in t.slots:
                        err(p + (key,), f"unknown slot {slot!r}")
                    elif fam.get(slot) != key:
                        err(p + (key,), f"slot {slot!r} is of family {fam.get(slot)!r}, not {key!r}")
                else:
                    err(p + (key,), f"unknown key (use id, count or one of {', '.join(ATTRIBUTE_FAMILIES)})")
        for ri, r in enumerate(t.expect.relations):
            p = base + ("expect", "relations", ri)
            if fam.get(r.slot) not in RELATION_FAMILIES:
                err(p + ("slot",), f"{r.slot!r} is not a relation slot (spatial or action)")
            for k in ("subject", "object"):
                if getattr(r, k) not in object_ids:
                    err(p + (k,), f"{getattr(r, k)!r} is not an expected object id")
        for wi, (a, b) in enumerate(t.twins):
            for s in (a, b):
                if s not in t.slots:
                    err(base + ("twins", wi), f"twin names unknown slot {s!r}")
            if a in fam and b in fam and fam[a] != fam[b]:
                err(base + ("twins", wi), f"twin swaps slots of different families ({fam[a]} vs {fam[b]})")
        total = 1
        for c in t.slots.values():
            total *= len(m.concepts[c].values) if c in m.concepts else 1
        if total > MAX_COMBINATIONS:
            err(base + ("slots",), f"expands to {total:,} combinations (limit {MAX_COMBINATIONS:,}); use shorter lists")

    if m.heldout is not None:
        h = m.heldout
        families = {c.family for c in m.concepts.values()}
        for i, f in enumerate(h.bind):
            if f not in families:
                err(("heldout", "bind", i), f"no concept list has family {f!r}")
        if h.bind[1] != "object" or h.bind[0] not in ATTRIBUTE_FAMILIES:
            err(("heldout", "bind"), "bind must be [<attribute family>, object]")
        if (h.fraction is None) == (h.compositions is None):
            err(("heldout",), "give exactly one of 'fraction' or 'compositions'")
        if h.compositions:
            known = {f: {v.name for c in m.concepts.values() if c.family == f for v in c.values} for f in h.bind}
            for i, pair in enumerate(h.compositions):
                for f, v in zip(h.bind, pair):
                    if v not in known.get(f, ()):
                        err(("heldout", "compositions", i), f"{v!r} is not a known {f} value")
    return problems
