"""What a run is, what it was made under, and which runs are ranked together: the one rule of ``board``,
``compare`` and the gate (``compare --fail-on-drop``).

A run's settings fall in five kinds (from its ``run.yaml``, the model card its manifest records, its prompts and
its judges):

* **subject** — whose images: the model (name, repo revision) and its variant (``loras`` / ``components``);
* **protocol** — how the images are asked for and read: the suite and its version, images per prompt, and the
  judges (model, revision, protocol). Runs are ranked together only when it is equal;
* **model settings** — how the subject makes its images: steps, guidance, size, dtype, scheduler, the pipeline
  call's extra arguments, the source kind (a folder of images, an endpoint), and every setting this version
  does not know. They are part of what is ranked: each model at its authors' settings, as every benchmark
  table ranks (GenEval, T2I-CompBench, HEIM). Shown beside the run, never a reason to set it apart — unless
  ``--strict-settings`` (an ablation: one model, one setting changed) asks for today's strict grouping;
* **sampling** — which images: prompts, ``--limit``, the base seed. Runs are compared on the prompts they share
  (paired by seed where the seeds match);
* **how it ran** — device, batch size, offload …: none changes what is made.

The same subject at several model settings is a *settings study* (GA-Eval, ICLR 2026: guidance alone moves
scores): ranked with the rest and flagged beside the ranking. A gate compares weights at fixed settings, so
``compare --fail-on-drop`` refuses two runs whose model settings differ unless told otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..api import NOT_IDENTITY

SUBJECT = ("model", "loras", "components", "name", "base_url")  # name: --name; base_url: the server of openai:MODEL
SAMPLING = ("prompts", "limit", "seed")
PROTOCOL = ("suite", "images_per_prompt")  # besides the judges (entry["judges"], compared where shared)
HOW_IT_RAN = frozenset(NOT_IDENTITY) | {"scorers", "probe_model", "layout"}  # layout: how a folder is read
SHOWN_FIRST = ("steps", "guidance", "size", "dtype", "scheduler", "source", "suite", "images_per_prompt")

# the rule in words: `board --help`, `compare --help` and both pages state it
RULE = ("Runs are ranked together when their protocol is equal: the suite and its version, images per prompt, and "
        "every judge they share (model, revision, judge protocol); they are compared on the prompts they share. A "
        "model's own generation settings (steps, guidance, size, scheduler, dtype, LoRAs, source) are part of what "
        "is ranked and shown beside it; the same model (weights and variant) at several settings is a settings "
        "study, flagged beside the ranking.")


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


def model_settings(entry: dict) -> dict:
    """How the run's model made its images (steps, guidance, size, dtype, scheduler, call arguments, source kind,
    and every setting this version does not know): what is ranked with the model, never what sets it apart."""
    out = {}
    for k, v in (entry.get("config") or {}).items():
        if k in SUBJECT or k in SAMPLING or k in PROTOCOL or k in HOW_IT_RAN:
            continue
        out[str(k)] = _canon(v)
    model = entry.get("model") or {}
    for k, v in (model.get("call") or {}).items():
        out.setdefault(str(k), _canon(v))  # the card's pipeline-call arguments (true_cfg_scale, a scheduler …)
    if model.get("kind") and model.get("kind") != "pipeline":  # images from a folder, an endpoint, a callable
        out["source"] = str(model["kind"])
    return _ordered(out)


def protocol(entry: dict, *, with_suite: bool = True) -> dict:
    """What must be equal for runs to be ranked together, besides their shared judges (:func:`_judges_agree`)."""
    out = {"images_per_prompt": _canon((entry.get("config") or {}).get("images_per_prompt"))}
    if with_suite:
        out["suite"] = ", ".join(entry.get("suites") or [])
    return _ordered(out)


def conditions(entry: dict, *, with_suite: bool = True) -> dict:
    """Every score-relevant setting: the model settings and the protocol (what ``--strict-settings`` groups by)."""
    return _ordered({**model_settings(entry), **protocol(entry, with_suite=with_suite)})


def _ordered(d: dict) -> dict:
    return dict(sorted(d.items(), key=lambda kv: (SHOWN_FIRST.index(kv[0]) if kv[0] in SHOWN_FIRST else 99, kv[0])))


def settings_text(entry: dict) -> str:
    """``"steps 20 · guidance 7 · size 48 · dtype float32"``: a run's model settings, as its row shows them."""
    return " · ".join(f"{k} {shown(v)}" for k, v in model_settings(entry).items()) or "—"


def model_card(manifest: dict) -> dict:
    """The model card's fields a board (and ``compare``) keeps of a run, with its variant's record where it has one (its label names
    the files, scales and sha256: variants/labels.py)."""
    card = manifest.get("model")
    if not isinstance(card, dict):
        return {"name": card}
    # kind: a run without a pipeline (a folder of images, an endpoint) ranks like any other, its source shown; its
    # target (a folder, a URL) is this machine's or the provider's address, never published
    out = {k: card.get(k) for k in ("name", "repo", "revision", "pipeline", "call")}
    if card.get("kind"):
        out["kind"] = card["kind"]
    adapted = card.get("adapted")
    if not isinstance(adapted, dict):
        return out
    # what the label reads: the same sources and paths as run.yaml (the entry's config), each with its sha256 and
    # scale; a Hub LoRA's local cache path ("file") is this machine's, never published
    if isinstance(adapted.get("loras"), list):
        adapted = {**adapted, "loras": [{k: v for k, v in x.items() if k != "file"} if isinstance(x, dict) else x
                                        for x in adapted["loras"]]}
    return {**out, "adapted": adapted}


def run_entry(run_id: str, config: dict, manifest: dict, suites: list, judges: dict) -> dict:
    """What the rule reads of a run, as a board entry holds it: ``compare`` builds one per run folder."""
    return {"id": run_id, "config": {k: v for k, v in config.items() if k != "out"},
            "model": model_card(manifest), "suites": list(suites), "judges": judges}


def subject(entry: dict) -> dict:
    cfg, model = entry.get("config") or {}, entry.get("model") or {}
    out = {"model": str(model.get("name") or cfg.get("model") or entry.get("folder")),
           "revision": model.get("revision")}
    for k in ("loras", "components"):
        if cfg.get(k):
            out[k] = _canon(cfg[k])
    return out


def sampling(entry: dict) -> dict:
    cfg = entry.get("config") or {}  # (images per prompt is protocol; shown with the sampling all the same)
    return {k: _canon(cfg.get(k)) for k in ("limit", "images_per_prompt", "seed")}


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
    conditions: dict                               # what they share: the protocol (and the settings when strict)
    judges: dict = field(default_factory=dict)     # scorer -> identity, over the group's runs
    studies: list = field(default_factory=list)    # settings studies among the entries (:func:`studies`)


def _judges_agree(judges: dict, others: dict) -> bool:
    return all(judges[k] == others[k] for k in set(judges) & set(others))


def _shared(entry: dict, *, allow_different_suites: bool, strict_settings: bool) -> dict:
    with_suite = not allow_different_suites
    return conditions(entry, with_suite=with_suite) if strict_settings else protocol(entry, with_suite=with_suite)


def groups(entries: list[dict], *, allow_different_suites: bool = False, strict_settings: bool = False) -> list[Group]:
    """Runs ranked together (equal protocol and agreeing judges; with ``strict_settings`` equal model settings as
    well), largest group first (then board order). The one rule of ``board``, ``compare`` and the gate."""
    by_key: dict = {}
    for e in entries:
        key = json.dumps(_shared(e, allow_different_suites=allow_different_suites, strict_settings=strict_settings),
                         sort_keys=True)
        by_key.setdefault(key, []).append(e)
    found = []
    for members in by_key.values():
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
        out.append(Group(f"G{i}", part, _shared(part[0], allow_different_suites=allow_different_suites,
                                               strict_settings=strict_settings),
                         dict(sorted(judges.items())), studies(part)))
    return out


def _subject_key(entry: dict) -> str:
    return json.dumps(subject(entry), sort_keys=True)


def studies(entries: list[dict]) -> list[dict]:
    """The same subject (model, revision, variant) at several model settings: ``{"model", "runs": [ids],
    "varies": [setting names], "n_settings"}`` per subject, in board order (its runs at equal settings, e.g. on
    other prompts, belong to it too). Each run stays ranked; the study is flagged."""
    by_subject: dict = {}
    for e in entries:
        by_subject.setdefault(_subject_key(e), []).append(e)
    out = []
    for members in by_subject.values():
        made = [model_settings(e) for e in members]
        keys = list(_ordered({k: None for m in made for k in m}))
        varies = [k for k in keys if len({json.dumps(m.get(k), sort_keys=True) for m in made}) > 1]
        if len(members) > 1 and varies:
            out.append({"model": subject(members[0])["model"], "runs": [e["id"] for e in members], "varies": varies,
                        "n_settings": len({json.dumps(m, sort_keys=True) for m in made})})
    for i, st in enumerate(out, 1):
        st["name"] = f"S{i}"
    return out


def rule_differences(a: dict, b: dict, *, allow_different_suites: bool = False) -> dict:
    """How entry ``b`` differs from entry ``a`` under the one rule: ``{"protocol": [...], "settings": [...]}``,
    each ``"steps 2 (was 20)"``; protocol differences include a shared judge that differs."""
    def diff(x: dict, y: dict) -> list[str]:
        return [f"{k} {shown(y.get(k))} (was {shown(x.get(k))})" for k in list(x) + [k for k in y if k not in x]
                if x.get(k) != y.get(k)]

    with_suite = not allow_different_suites
    prot = diff(protocol(a, with_suite=with_suite), protocol(b, with_suite=with_suite))
    ja, jb = a.get("judges") or {}, b.get("judges") or {}
    prot += [f"judge {k}: {_judge_text(jb[k])} (was {_judge_text(ja[k])})" for k in sorted(set(ja) & set(jb))
             if ja[k] != jb[k]]
    return {"protocol": prot, "settings": diff(model_settings(a), model_settings(b))}


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
