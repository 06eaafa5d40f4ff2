"""What a run is, what it was made under, and which runs may be ranked together.

A run's settings fall in four kinds (from its ``run.yaml``, the model card its manifest records, its
prompts and its judges):

* **subject** — what the board ranks: the model (name, repo revision) and its variant (the ``loras`` /
  ``components`` a run records);
* **conditions** — what changes scores besides the subject: steps, guidance, size, dtype, the pipeline
  call's extra arguments (a scheduler, a true-CFG scale), the suite, and every setting this version does not
  know (a newer run's key is taken to matter until said otherwise);
* **sampling** — which images: prompts, ``--limit``, ``-n``, the base seed. Runs differing only here are
  compared on the prompts they share (paired by seed where the seeds match);
* **how it ran** — device, batch size, offload …: none changes what is made.

Runs are ranked together only when their conditions are equal and their judges agree (a scorer both have
was run with the same model, revision and protocol). Every other run goes to its own group, and the page
and the printout name the difference (GA-Eval, ICLR 2026: guidance alone moves scores).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..api import NOT_IDENTITY

SUBJECT = ("model", "loras", "components")
SAMPLING = ("prompts", "limit", "images_per_prompt", "seed")
HOW_IT_RAN = frozenset(NOT_IDENTITY) | {"scorers", "probe_model"}
SHOWN_FIRST = ("steps", "guidance", "size", "dtype", "scheduler", "suite")  # column order on the page


def _canon(v):
    """One spelling per value: ``7`` and ``7.0`` are one guidance; mappings compare by content."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
        return int(v)
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, dict):
        return {str(k): _canon(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    return str(v)


def shown(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, (dict, list)):
        return json.dumps(v, ensure_ascii=False, sort_keys=True)
    return str(v)


def conditions(entry: dict, *, with_suite: bool = True) -> dict:
    """The score-relevant settings of a board entry (its stored ``config``, ``model`` card and ``suites``)."""
    out = {}
    for k, v in (entry.get("config") or {}).items():
        if k in SUBJECT or k in SAMPLING or k in HOW_IT_RAN:
            continue
        out[str(k)] = _canon(v)
    for k, v in ((entry.get("model") or {}).get("call") or {}).items():
        out.setdefault(str(k), _canon(v))  # the card's pipeline-call arguments (true_cfg_scale, a scheduler …)
    if with_suite:
        out["suite"] = ", ".join(entry.get("suites") or [])
    return dict(sorted(out.items(), key=lambda kv: (SHOWN_FIRST.index(kv[0]) if kv[0] in SHOWN_FIRST else 99, kv[0])))


def subject(entry: dict) -> dict:
    cfg, model = entry.get("config") or {}, entry.get("model") or {}
    out = {"model": str(model.get("name") or cfg.get("model") or entry.get("folder")),
           "revision": model.get("revision")}
    for k in ("loras", "components"):
        if cfg.get(k):
            out[k] = _canon(cfg[k])
    return out


def sampling(entry: dict) -> dict:
    cfg = entry.get("config") or {}
    return {k: _canon(cfg.get(k)) for k in SAMPLING if k != "prompts"}


def _label(entry: dict) -> str:
    """The model with its variant, named by the one rule of variants/labels.py from what the run's manifest records
    (``model.adapted``: file, scale, short sha256); an entry added before the board kept that record is named from
    its run.yaml specs."""
    from ..variants.labels import described_of_config, model_label

    adapted = (entry.get("model") or {}).get("adapted")
    return model_label(subject(entry)["model"], adapted if isinstance(adapted, dict)
                       else described_of_config(entry.get("config") or {}))


def labels(entries: list[dict]) -> list[str]:
    """A short, unique name per entry: the model (+ its variant), then what tells equal names apart."""
    base = [_label(e) for e in entries]
    out = list(base)
    for name in set(base):
        idx = [i for i, b in enumerate(base) if b == name]
        if len(idx) < 2:
            continue
        facts = [{**{f"rev": subject(entries[i]).get("revision")}, **sampling(entries[i]), **conditions(entries[i])}
                 for i in idx]
        keys = [k for k in facts[0] if len({json.dumps(f.get(k), sort_keys=True) for f in facts}) > 1]
        for i, f in zip(idx, facts):
            out[i] = name + (" · " + ", ".join(f"{k} {shown(f.get(k))}" for k in keys) if keys else "")
    for i, lab in enumerate(out):
        if out.count(lab) > 1:
            out[i] = f"{lab} ({entries[i].get('folder')})"
    return [f"{lab} #{i + 1}" if out.count(lab) > 1 else lab for i, lab in enumerate(out)]


# --- groups ---------------------------------------------------------------------------------------------------


@dataclass
class Group:
    name: str
    entries: list                                  # board index entries, in board order
    conditions: dict                               # the settings they share
    judges: dict = field(default_factory=dict)     # scorer -> identity, over the group's runs


def _judges_agree(judges: dict, others: dict) -> bool:
    return all(judges[k] == others[k] for k in set(judges) & set(others))


def groups(entries: list[dict], *, allow_different_suites: bool = False) -> list[Group]:
    """Runs with equal conditions and agreeing judges, largest group first (then board order)."""
    by_conditions: dict = {}
    for e in entries:
        key = json.dumps(conditions(e, with_suite=not allow_different_suites), sort_keys=True)
        by_conditions.setdefault(key, []).append(e)
    found = []
    for members in by_conditions.values():
        parts: list[list] = []
        for e in members:
            for part in parts:
                if all(_judges_agree(e.get("judges") or {}, o.get("judges") or {}) for o in part):
                    part.append(e)
                    break
            else:
                parts.append([e])
        found += parts
    order = {e["id"]: i for i, e in enumerate(entries)}
    found.sort(key=lambda p: (-len(p), order[p[0]["id"]]))
    out = []
    for i, part in enumerate(found, 1):
        judges: dict = {}
        for e in part:
            judges.update(e.get("judges") or {})
        out.append(Group(f"G{i}", part, conditions(part[0], with_suite=not allow_different_suites),
                         dict(sorted(judges.items()))))
    return out


def _judge_text(j: dict) -> str:
    return " ".join(f"{k} {j.get(k)}" for k in ("model", "revision", "protocol") if j.get(k)) or "unnamed"


def differences(group: Group, reference: Group) -> list[str]:
    """How ``group`` differs from ``reference``: ``"guidance 3.0 (G1: 7.0)"``, ``"judge mini-judge: …"``."""
    out = []
    for k in list(reference.conditions) + [k for k in group.conditions if k not in reference.conditions]:
        a, b = group.conditions.get(k), reference.conditions.get(k)
        if a != b:
            out.append(f"{k} {shown(a)} ({reference.name}: {shown(b)})")
    for k in sorted(set(group.judges) & set(reference.judges)):
        if group.judges[k] != reference.judges[k]:
            out.append(f"judge {k}: {_judge_text(group.judges[k])} ({reference.name}: {_judge_text(reference.judges[k])})")
    if not out and group is not reference:
        out.append("a judge they share differs between runs (see the runs table)")
    return out
