"""Davidsonian Scene Graph (DSG) question generation: the text side (prompts to an LLM, parsing its
answers). No model here: :mod:`.llm_questions` runs the LLM; this module is pure text, so every
parsing rule is testable without one.

The method is DSG's (Cho et al., ICLR 2024; github.com/j-min/DSG at 7330119a39f76ff90e619a8bd3ff321e71aa986b):
three LLM steps per prompt, each an instruction, in-context examples as ``input: … / output: …``
pairs and the test input (``dsg/query_utils.py``: ``make_prompt``, ``generate_dsg``):

1. prompt → tuples, ``id | tuple`` lines such as ``2 | attribute - color (bicycle, red)``;
2. prompt + tuples → questions, ``id | question``;
3. prompt + tuples → dependencies, ``id | parent ids`` (comma-separated, ``0`` = none).

Ids start at 1 (``create_train_example``: ``f"{i+1} | …"``). Tuple names follow DSG-1k's annotations
(``dsg/data/dsg-1k-anns.csv``: ``entity - whole``, ``attribute - color``, ``other - count (x, ==2)``,
``relation - spatial``, ``global - - (photo)`` …), which is also DPG-Bench's CSV format, so the
records come out of :func:`.dpg.dsg_record` exactly like an imported DPG item. DSG uses 23 TIFA-160
examples; the examples and instructions here are our own, shorter, in the same format.

Parsing is stricter than DSG's ``parse_utils.py`` (which raises on any line without ``|``): an
LLM's stray lines are skipped with a note, invalid tuples, questions without ``?``, repeated
questions and dependencies on no kept question or closing a cycle are dropped with a note, and when nothing
usable is left :class:`DsgError` says why (the caller falls back to the whole-prompt question).
"""

from __future__ import annotations

import re

_INSTRUCTIONS = {
    "tuple": ("Task: given an input prompt for an image, list the atomic facts the image must show as "
              "skill-specific tuples: entities first, then their attributes, counts and relations. "
              "Only what the prompt states; never repeat a tuple.\noutput format: id | tuple"),
    "question": ("Task: given an input prompt and its tuples, rewrite each tuple as one yes/no question "
                 "about the image.\noutput format: id | question"),
    "dependency": ("Task: given an input prompt and its tuples, give the parent tuples of each tuple: the "
                   "entities it is about (0 for none).\noutput format: id | dependencies (comma separated)"),
}

# (prompt, [(tuple, parent ids, question)]): written for this project in DSG-1k's tuple vocabulary
EXAMPLES = [
    ("A red bicycle leans against a brick wall next to two potted plants.", [
        ("entity - whole (bicycle)", "0", "Is there a bicycle?"),
        ("entity - whole (wall)", "0", "Is there a wall?"),
        ("entity - whole (plants)", "0", "Are there plants?"),
        ("attribute - color (bicycle, red)", "1", "Is the bicycle red?"),
        ("attribute - material (wall, brick)", "2", "Is the wall made of brick?"),
        ("other - count (plants, ==2)", "3", "Are there two plants?"),
        ("attribute - state (plants, potted)", "3", "Are the plants potted?"),
        ("relation - spatial (bicycle, wall, lean against)", "1,2", "Is the bicycle leaning against the wall?"),
        ("relation - spatial (bicycle, plants, next to)", "1,3", "Is the bicycle next to the plants?"),
    ]),
    ("An oil painting of an old fisherman mending a net on a wooden pier.", [
        ("global - - (oil painting)", "0", "Is this an oil painting?"),
        ("entity - whole (fisherman)", "0", "Is there a fisherman?"),
        ("attribute - state (fisherman, old)", "2", "Is the fisherman old?"),
        ("entity - whole (net)", "0", "Is there a net?"),
        ("relation - action (fisherman, net, mend)", "2,4", "Is the fisherman mending the net?"),
        ("entity - whole (pier)", "0", "Is there a pier?"),
        ("attribute - material (pier, wood)", "6", "Is the pier made of wood?"),
        ("relation - spatial (fisherman, pier, on)", "2,6", "Is the fisherman on the pier?"),
    ]),
    ("A close-up photo of a cat with green eyes sleeping under a sign that says \"quiet\".", [
        ("global - - (close-up photo)", "0", "Is this a close-up photo?"),
        ("entity - whole (cat)", "0", "Is there a cat?"),
        ("entity - part (cat's eyes)", "2", "Does the cat have eyes?"),
        ("attribute - color (cat's eyes, green)", "3", "Are the cat's eyes green?"),
        ("attribute - state (cat, sleeping)", "2", "Is the cat sleeping?"),
        ("entity - whole (sign)", "0", "Is there a sign?"),
        ("other - text rendering (sign, \"quiet\")", "6", "Does the sign say \"quiet\"?"),
        ("relation - spatial (cat, sign, under)", "2,6", "Is the cat under the sign?"),
    ]),
]

STEPS = ("tuple", "question", "dependency")


def _numbered(items) -> str:
    return "\n".join(f"{i} | {x}" for i, x in enumerate(items, 1))


def build_prompt(step: str, text: str, tuples: str = "") -> str:
    """The user message of one DSG step: instruction, examples, then the test input awaiting its
    output (DSG ``make_prompt``). ``tuples``: step 1's parsed ``id | tuple`` lines (steps 2, 3)."""
    shots = []
    for prompt, rows in EXAMPLES:
        given = prompt if step == "tuple" else prompt + "\n" + _numbered(r[0] for r in rows)
        want = [r[0] for r in rows] if step == "tuple" else [r[2] if step == "question" else r[1] for r in rows]
        shots.append(f"input: {given}\noutput: {_numbered(want)}")
    given = text if step == "tuple" else text + "\n" + tuples
    return f"{_INSTRUCTIONS[step]}\n\n" + "\n\n".join(shots) + f"\n\ninput: {given}\noutput:"


class DsgError(ValueError):
    """The LLM's output gave nothing usable; the message is the record's fallback reason."""


_LINE = re.compile(r"^\s*(?:[-*]\s*)?(\d{1,3})\s*\|\s*(.*?)\s*$")
_TUPLE = re.compile(r"^([a-z][a-z ]*?)\s+-\s+([-a-z _]*?)\s*\((.+)\)$", re.I)


def parse_lines(output: str, notes: list[str], step: str) -> dict[int, str]:
    """``{id: value}`` from ``id | value`` lines. The answer ends where the model starts a new
    ``input:`` (DSG ``parse_with_input_name``); a leading ``output:`` (or echoed input) is dropped;
    other lines are skipped and counted in ``notes``; a repeated id keeps its first value."""
    body = output.split("</think>")[-1].strip()  # a thinking block, should the template not suppress it
    if body.startswith("input:") and "output:" in body:  # the input echoed before the answer
        body = body[body.index("output:"):]
    body = re.sub(r"^output:", "", re.split(r"(?m)^\s*input:", body)[0])
    out, skipped = {}, 0
    for line in body.splitlines():
        m = _LINE.match(line)
        if not m:
            skipped += bool(line.strip()) and not line.strip().startswith("```")
            continue
        i, value = int(m.group(1)), m.group(2)
        if i in out or not value:
            skipped += 1
            continue
        out[i] = value
    if skipped:
        notes.append(f"{step}: {skipped} line(s) not of the form 'id | {step}' skipped")
    return out


def split_tuple(t: str) -> tuple[str, str] | None:
    """(category_broad, category_detailed) of ``"attribute - color (bicycle, red)"``, else None."""
    m = _TUPLE.match(t.strip())
    return (m.group(1).strip().lower(), m.group(2).strip().lower()) if m else None


def parse_tuples(output: str, notes: list[str]) -> dict[int, str]:
    lines = parse_lines(output, notes, "tuple")
    good = {i: t for i, t in lines.items() if split_tuple(t)}
    if len(good) < len(lines):
        notes.append(f"tuple: {len(lines) - len(good)} not of the form 'category - detail (arguments)' dropped")
    if not good:
        raise DsgError("no 'id | category - detail (arguments)' tuple in the LLM's tuple output")
    return dict(sorted(good.items()))


def parse_dependencies(value: str) -> list[int]:
    """DSG ``clean_dependency_id``: the numeric items of a comma-separated list; 0 means none."""
    return [int(d) for d in (x.strip() for x in value.split(",")) if d.isdigit() and int(d) != 0]


def assemble(tuples: dict[int, str], question_out: str, dependency_out: str, notes: list[str]) -> list[dict]:
    """Rows for :func:`.dpg.dsg_record` from step 1's tuples and steps 2 and 3's raw outputs. A tuple
    without a question is dropped; a question asked twice keeps its first id (children follow it);
    a parent must be another kept question, and one that would close a cycle is dropped (DSG-1k's
    own annotations have parents declared later, self-references and unknown ids)."""
    questions = parse_lines(question_out, notes, "question")
    deps = parse_dependencies_map(dependency_out, notes)
    kept, seen, alias = {}, {}, {}
    for i, t in tuples.items():
        q = " ".join((questions.get(i) or "").split())
        if not q.endswith("?"):
            notes.append(f"tuple {i}: {'no question' if not q else 'question without ?'}; dropped")
        elif q.lower() in seen:
            alias[i] = seen[q.lower()]
            notes.append(f"tuple {i}: same question as {alias[i]}; dropped")
        else:
            seen[q.lower()], kept[i] = i, q
    if not kept:
        raise DsgError("no tuple got a yes/no question ('id | question?') in the LLM's question output")
    parents: dict[int, list[int]] = {}
    for i in kept:
        if i not in deps:
            notes.append(f"tuple {i}: no dependency line; no parents")
        asked = list(dict.fromkeys(alias.get(d, d) for d in deps.get(i, [])))
        parents[i] = [d for d in asked if d in kept and d != i and not _reaches(parents, d, i)]
        if len(parents[i]) < len(asked):
            notes.append(f"tuple {i}: parent(s) {', '.join(str(d) for d in asked if d not in parents[i])} "
                         "not another question or closing a cycle; ignored")
    return [{"pid": i, "deps": parents[i], "tuple": tuples[i], "question": q,
             "category_broad": split_tuple(tuples[i])[0], "category_detailed": split_tuple(tuples[i])[1]}
            for i, q in kept.items()]


def _reaches(parents: dict[int, list[int]], start: int, goal: int) -> bool:
    """Whether ``goal`` is an ancestor-or-self of ``start`` along the edges accepted so far."""
    todo, seen = [start], set()
    while todo:
        n = todo.pop()
        if n == goal:
            return True
        if n not in seen:
            seen.add(n)
            todo += parents.get(n, [])
    return False


def parse_dependencies_map(output: str, notes: list[str]) -> dict[int, list[int]]:
    return {i: parse_dependencies(v) for i, v in parse_lines(output, notes, "dependency").items()}
