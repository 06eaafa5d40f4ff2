"""Scorer registry: names → cards (data) → classes imported on first use.

Sources, later ones override earlier ones with the same name:

1. every ``*.yaml`` in ``t2i_audit/cards/scorers/`` (one card mapping, or ``scorers: [cards]``);
2. Python entry points in group ``t2i_audit.scorers``: the entry point's name is the scorer
   name and its object is either a :class:`~t2i_audit.scorers.base.Scorer` subclass with a
   ``default_card`` dict attribute, a card dict, a list of card dicts, or a callable returning
   one of those;
3. extra card files given by the user (``--card FILE``), e.g. a calibrated copy.

Listing never imports a scorer class (so no torch).
"""

from __future__ import annotations

import copy
import importlib
import inspect
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import AuditError, did_you_mean
from ..safeload import load_yaml

PACKAGE_DIR = Path(__file__).resolve().parent.parent
CARDS_DIR = PACKAGE_DIR / "cards" / "scorers"
ENTRY_POINT_GROUP = "t2i_audit.scorers"
PATH_KEYS = ("config", "checkpoint", "path")  # model keys whose values are files/folders
CKPT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin", ".ckpt")


def resolve_path(value: str, card_dir: Path | None) -> str:
    """``pkg:sub/path`` → inside the t2i_audit package; a relative path → beside the card."""
    s = str(value)
    if s.startswith("pkg:"):
        return str(PACKAGE_DIR / s[4:])
    p = Path(s).expanduser()
    if not p.is_absolute() and card_dir is not None:
        p = card_dir / p
    return str(p)


def _normalise(card: Mapping, source: str, card_dir: Path | None) -> dict:
    if not isinstance(card, Mapping) or not card.get("name"):
        raise AuditError(f"{source}: a scorer card must be a mapping with a 'name'")
    card = copy.deepcopy(dict(card))
    if "class" not in card:
        raise AuditError(f"{source}: scorer card {card['name']!r} has no 'class' "
                         "(\"module:Class\")")
    model = dict(card.get("model") or {})
    for key in PATH_KEYS:
        if model.get(key):
            model[key] = resolve_path(model[key], card_dir)
    pre = model.get("pretrained")  # an open_clip tag ("openai") stays; a checkpoint path resolves
    if isinstance(pre, str) and (pre.startswith(("pkg:", "./", "../", "/", "~")) or pre.endswith(CKPT_SUFFIXES)):
        model["pretrained"] = resolve_path(pre, card_dir)
    # a local folder/checkpoint as the model id itself
    mid = model.get("id")
    if isinstance(mid, str) and (mid.startswith(("pkg:", "./", "../", "/", "~"))):
        model["id"] = resolve_path(mid, card_dir)
        model.setdefault("local", True)
    card["model"] = model
    card["_file"] = source
    return card


def load_card_file(path: Path | str) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise AuditError(f"{path}: scorer card file not found")
    data = load_yaml(path)
    if data is None:
        return []
    items = data["scorers"] if isinstance(data, Mapping) and "scorers" in data else data
    if isinstance(items, Mapping):
        items = [items]
    if not isinstance(items, list):
        raise AuditError(f"{path}: expected a card mapping or 'scorers: [...]'")
    return [_normalise(c, str(path), path.parent) for c in items]


def _entry_point_cards() -> list[dict]:
    out = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as e:  # a broken plug-in must not break listing the others
            raise AuditError(f"entry point {ep.name!r} ({ep.value}) failed to load: {e}") from e
        if inspect.isclass(obj):
            card = dict(getattr(obj, "default_card", {}) or {})
            card.setdefault("class", f"{obj.__module__}:{obj.__qualname__}")
            cards = [card]
        else:
            val = obj() if callable(obj) else obj
            cards = val if isinstance(val, list) else [val]
        for c in cards:
            c = dict(c)
            c.setdefault("name", ep.name)
            out.append(_normalise(c, f"entry point {ep.name}", None))
    return out


def load_cards(extra_files: Iterable[Path | str] = ()) -> dict[str, dict]:
    cards: dict[str, dict] = {}
    for f in sorted(CARDS_DIR.glob("*.yaml")):
        for c in load_card_file(f):
            cards[c["name"]] = c
    for c in _entry_point_cards():
        cards[c["name"]] = c
    for f in extra_files:
        for c in load_card_file(f):
            cards[c["name"]] = c
    return cards


def deep_merge(base: Mapping, over: Mapping) -> dict:
    out = copy.deepcopy(dict(base))
    for k, v in (over or {}).items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def get_card(name: str, *, cards: Mapping[str, dict] | None = None,
             overrides: Mapping[str, Any] | None = None) -> dict:
    cards = load_cards() if cards is None else cards
    if name not in cards:
        raise AuditError(f"unknown scorer {name!r}.{did_you_mean(name, cards)}")
    card = cards[name]
    if overrides:
        card = deep_merge(card, overrides)
        card["model"] = _normalise(card, "overrides", Path.cwd())["model"]
    return card


def import_class(spec: str, source: str = "card"):
    mod_name, _, cls_name = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
        return getattr(mod, cls_name)
    except (ImportError, AttributeError) as e:
        raise AuditError(f"{source}: cannot import scorer class {spec!r} ({e})") from e


def create_scorer(name: str, *, device: str = "cpu", cards: Mapping[str, dict] | None = None,
                  overrides: Mapping[str, Any] | None = None):
    """Build (not load) the scorer ``name``; its class is imported here, on first use. Inside a
    ``t2i_audit.reuse`` session the one built for the first run is handed to every run (loaded once)."""
    from ..reuse import active

    session = active()
    if session is not None:
        return session.scorer(name, device, overrides,
                              lambda: create_scorer(name, device=device, cards=cards, overrides=overrides))
    card = get_card(name, cards=cards, overrides=overrides)
    cls = import_class(card["class"], card.get("_file", name))
    return cls(card, device=device)
