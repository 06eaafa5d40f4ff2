"""The mini open_clip judge as a scorer: the normal CLIP scorer, with ``pkg:`` resolved in
``model.pretrained`` too (the registry resolves only config/checkpoint/path keys)."""

from __future__ import annotations

from typing import Mapping

from ..scorers.clip import ClipScorer
from ..scorers.registry import resolve_path


class MiniClipJudge(ClipScorer):
    def resolved_model(self, cfg: Mapping | None = None) -> dict:
        cfg = super().resolved_model(cfg)
        pre = cfg.get("pretrained")
        if isinstance(pre, str) and pre.startswith("pkg:"):
            cfg = {**cfg, "pretrained": resolve_path(pre, None)}
        return cfg
