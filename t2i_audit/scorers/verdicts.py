"""Question dependencies and failure typing, from a prompt's structure. Pure Python, no torch.

A scorer answers *queries*: the prompt's own questions (``prompt["questions"]``) plus
*probe* queries that exist only to type a failure:

* ``<qid>~<other object id>`` — for an attribute question "is the cube red?", the same question
  with the attribute of another object of the same family ("is the cube blue?");
* ``<qid>~rev`` — for a relation question "is the cube left of the sphere?", the reversed one
  ("is the sphere left of the cube?").

:func:`judge` turns answers (``True`` / ``False`` / ``None`` = cannot tell) into per-question
verdicts with DSG dependencies (a question whose ``depends_on`` failed gets verdict ``None`` and
``skipped_by``), a prompt verdict and typed failures, one per failed slot:

==================  ==========================================================================
missing_object      an ``exists`` question failed (its dependants are skipped, not failed)
wrong_attribute     attribute absent, and not explained by the two cases below
swapped_binding     A shows B's value and B shows A's value (both own questions failed)
attribute_leakage   A shows B's value while B keeps it: both objects show B's attribute
reversed_relation   relation failed, the reversed relation holds
wrong_relation      relation failed, the reversed one does not hold either
wrong_count         a ``count`` question failed
==================  ==========================================================================
"""

from __future__ import annotations

from typing import Any, Mapping

PROBE_SEP = "~"

DEFAULT_TEMPLATES = {
    "attribute": "Is the {object} {value}?",
    "attribute_material": "Is the {object} made of {value}?",  # attribute_<family> overrides
    "relation": "Is the {subject} {relation} the {object}?",
}


def objects_by_id(prompt: Mapping) -> dict[str, dict]:
    return {o["id"]: o for o in prompt.get("objects", [])}


def _relation_text(prompt: Mapping, q: Mapping) -> str:
    for rel in prompt.get("relations", []) or []:
        if rel.get("slot") == q.get("slot") or (
            rel.get("subject") == q.get("subject") and rel.get("object") == q.get("object")
        ):
            return rel.get("text") or rel.get("name") or q.get("value", "")
    return q.get("value", "")


def build_queries(prompt: Mapping, templates: Mapping[str, str] | None = None) -> list[dict]:
    """The prompt's questions (``probe: None``) followed by the probe queries.

    Each probe carries ``probe: {"for": qid, "type": "cross"|"reverse", ...}`` and a text built
    from the structure with ``templates`` (keys ``attribute``, ``relation``).
    """
    tpl = {**DEFAULT_TEMPLATES, **(templates or {})}
    objs = objects_by_id(prompt)
    questions = list(prompt.get("questions", []))
    out = [dict(q, probe=None) for q in questions]
    for q in questions:
        if q.get("kind") == "attribute":
            a = objs.get(q.get("object"))
            fam = q.get("family")
            if a is None:
                continue
            for b in objs.values():
                if b["id"] == a["id"]:
                    continue
                other = (b.get("attributes") or {}).get(fam)
                if other is None or other == q.get("value"):
                    continue
                out.append({
                    "id": f"{q['id']}{PROBE_SEP}{b['id']}", "kind": "attribute",
                    "text": tpl.get(f"attribute_{fam}", tpl["attribute"]).format(
                        object=a["name"], value=other),
                    "object": a["id"], "family": fam, "value": other, "depends_on": [],
                    "probe": {"for": q["id"], "type": "cross", "source": b["id"]},
                })
        elif q.get("kind") == "relation":
            s, o = objs.get(q.get("subject")), objs.get(q.get("object"))
            if s is None or o is None:
                continue
            out.append({
                "id": f"{q['id']}{PROBE_SEP}rev", "kind": "relation",
                "text": tpl["relation"].format(subject=o["name"], relation=_relation_text(prompt, q),
                                               object=s["name"]),
                "subject": o["id"], "object": s["id"], "family": q.get("family"),
                "value": q.get("value"), "depends_on": [],
                "probe": {"for": q["id"], "type": "reverse"},
            })
    return out


def _failure(ftype: str, q: Mapping, obj: str | None, detail: str) -> dict:
    return {"type": ftype, "slot": q.get("slot") or obj, "object": obj, "question_id": q["id"],
            "detail": detail}


def _resolve(questions: list[Mapping], answers: Mapping[str, bool | None]) -> dict[str, dict]:
    """Each question's state: its answer, and ``skipped_by`` = the dependencies that failed or
    were skipped themselves (then its verdict is ``None``).

    A depth-first walk with an explicit stack, not recursion: an imported DPG chain of 1,500
    questions (q1 → q2 → …) would pass the interpreter's recursion limit. A dependency already on
    the walk's path (a cycle in ``depends_on``) counts by its own answer.
    """
    by_id = {q["id"]: q for q in questions}
    state: dict[str, dict] = {}

    def deps(qid: str):
        return iter([d for d in by_id[qid].get("depends_on", []) or [] if d in by_id])

    def blocks(d: Mapping) -> bool:
        return d["verdict"] is False or bool(d["skipped_by"])

    for root in by_id:
        if root in state:
            continue
        frames = [[root, deps(root), []]]  # [question id, its dependencies left, blocked by]
        on_path = {root}
        while frames:
            qid, todo, blocked = frames[-1]
            for dep in todo:
                if dep in state or dep in on_path:
                    own = answers.get(dep)
                    if blocks(state[dep] if dep in state else {"verdict": own, "skipped_by": []}):
                        blocked.append(dep)
                    continue
                frames.append([dep, deps(dep), []])  # resolve dep first; we come back to qid after
                on_path.add(dep)
                break
            else:
                frames.pop()
                on_path.discard(qid)
                ans = answers.get(qid)
                state[qid] = {"verdict": None if blocked else ans, "answer": ans, "skipped_by": blocked}
                if frames and blocks(state[qid]):
                    frames[-1][2].append(qid)
    return state


def judge(prompt: Mapping, answers: Mapping[str, bool | None]) -> dict[str, Any]:
    """Resolve dependencies and type failures.

    ``answers`` maps query ids (questions and probes) to ``True``/``False``/``None``.
    Returns ``{"questions": {qid: {"verdict", "answer", "skipped_by"}}, "verdict", "failures"}``;
    the prompt verdict is ``None`` when no question could be answered.
    """
    questions = list(prompt.get("questions", []))
    objs = objects_by_id(prompt)
    state = _resolve(questions, answers)

    failures: list[dict] = []
    for q in questions:
        st = state[q["id"]]
        if st["verdict"] is not False:
            continue
        kind = q.get("kind")
        if kind == "exists":
            name = objs.get(q.get("object"), {}).get("name", q.get("object"))
            failures.append(_failure("missing_object", dict(q, slot=q.get("slot") or q.get("object")),
                                     q.get("object"), f"no {name}"))
        elif kind == "attribute":
            failures.append(_attribute_failure(q, questions, state, answers, objs))
        elif kind == "count":
            failures.append(_failure("wrong_count", q, q.get("object"),
                                     f"not exactly {q.get('number')}"))
        elif kind == "relation":
            rev = answers.get(f"{q['id']}{PROBE_SEP}rev")
            ftype = "reversed_relation" if rev is True else "wrong_relation"
            failures.append(_failure(ftype, q, q.get("subject"),
                                     f"{q.get('value')}: reversed holds" if rev else f"not {q.get('value')}"))
        else:
            failures.append(_failure("wrong_attribute", q, q.get("object"), f"{kind} failed"))

    considered = [s for s in state.values() if s["verdict"] is not None or s["skipped_by"]]
    if not considered:
        verdict = None
    else:
        verdict = all(s["verdict"] is True for s in considered)
    return {"questions": state, "verdict": verdict, "failures": failures}


def _attribute_failure(q, questions, state, answers, objs) -> dict:
    a_id, fam, a_val = q.get("object"), q.get("family"), q.get("value")
    a_name = objs.get(a_id, {}).get("name", a_id)
    for b in objs.values():
        if b["id"] == a_id:
            continue
        b_val = (b.get("attributes") or {}).get(fam)
        if b_val is None or b_val == a_val:
            continue
        if answers.get(f"{q['id']}{PROBE_SEP}{b['id']}") is not True:
            continue  # A does not show B's value: not a binding error with this B
        qb = next((x for x in questions if x.get("kind") == "attribute" and x.get("object") == b["id"]
                   and x.get("family") == fam), None)
        if qb is None:
            continue
        b_ok = state[qb["id"]]["verdict"]
        b_has_a = answers.get(f"{qb['id']}{PROBE_SEP}{a_id}")
        if b_ok is False and b_has_a is True:
            return _failure("swapped_binding", q, a_id,
                            f"{a_name} is {b_val} and {b['name']} is {a_val}")
        if b_ok is True:
            return _failure("attribute_leakage", q, a_id,
                            f"{a_name} took {b['name']}'s {fam} {b_val}")
    return _failure("wrong_attribute", q, a_id, f"{a_name} is not {a_val}")
