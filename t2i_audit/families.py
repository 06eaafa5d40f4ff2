"""Per-family facts (families.yaml beside this file), looked up by the pipeline class that loaded.

No torch import: these are data lookups that the probes and the CLI share.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Optional

from .errors import AuditError
from .safeload import load_yaml

FAMILIES_FILE = Path(__file__).with_name("families.yaml")
_HIDDEN = re.compile(r"hidden_states\[-(\d+)\]")
_STACKED = re.compile(r"hidden_states\[(\d+(?:\s*,\s*\d+)+)\]")  # several layers, stacked (FLUX.2)


@lru_cache(maxsize=1)
def _data() -> dict:
    return load_yaml(FAMILIES_FILE)


def pipeline_family(pipeline_class: str) -> Optional[dict]:
    """The families.yaml entry of a pipeline class, or None for a class we have no data on."""
    return (_data().get("pipelines") or {}).get(pipeline_class)


def block_lists() -> dict[str, str]:
    """Denoiser attribute → label format, in hook order (families.yaml ``block_lists``)."""
    return dict(_data().get("block_lists") or {})


def image_stream_index(block_class: str) -> Optional[int]:
    return (_data().get("image_stream") or {}).get(block_class)


def joint_sequence(denoiser_class: str) -> dict[str, str]:
    """Block-list attribute → where the image tokens sit in its one caption+image sequence (families.yaml)."""
    return dict((_data().get("joint_sequence") or {}).get(denoiser_class) or {})


def conditioning_layer(pipeline_class: str, encoder: str, n_hidden: int, has_final: bool,
                       call: dict | None = None) -> tuple[Optional[str], str]:
    """(stored layer name the denoiser is conditioned on, how it was derived).

    ``n_hidden`` counts ``hidden_states`` (embeddings + one per block); ``has_final`` says the
    encoder's ``last_hidden_state`` differs from its last hidden state (CLIP's final layer norm).
    Returns ``(None, reason)`` when the conditioning is not one stored layer.
    """
    fam = pipeline_family(pipeline_class)
    if fam is None:
        return None, f"no conditioning data for {pipeline_class} (families.yaml)"
    spec = (fam.get("conditioning") or {}).get(encoder)
    if spec is None:
        return None, f"{pipeline_class} does not condition on {encoder}"
    clip_skip = (call or {}).get("clip_skip")
    if spec == "pooled":
        return "pooled", "pooled vector only"
    if spec == "last_hidden_state":
        if clip_skip:
            if fam.get("clip_skip") == "final_norm":
                return None, (f"clip_skip={clip_skip}: hidden_states[-{clip_skip + 1}] through the final layer "
                              "norm, not a stored layer")
            return f"h{n_hidden - 1 - clip_skip:02d}", f"hidden_states[-{clip_skip + 1}] (clip_skip)"
        return ("final" if has_final else f"h{n_hidden - 1:02d}"), "last_hidden_state"
    stacked = stacked_layers(pipeline_class, encoder, call)
    if stacked is not None:
        return "cond", f"hidden_states{stacked} stacked on the feature axis (stored as 'cond')"
    m = _HIDDEN.fullmatch(str(spec))
    if not m:
        raise AuditError(f"{FAMILIES_FILE}: {pipeline_class}.{encoder}: unknown conditioning {spec!r}")
    k = int(m.group(1)) + (int(clip_skip) if clip_skip and fam.get("clip_skip") == "hidden" else 0)
    return f"h{n_hidden - k:02d}", f"hidden_states[-{k}]"


def stacked_layers(pipeline_class: str, encoder: str, kwargs: dict | None = None) -> Optional[list[int]]:
    """Indices of the hidden states a pipeline stacks side by side per token as its conditioning (FLUX.2:
    ``hidden_states[10,20,30]``), or None. The family's ``stacked_layers`` names the encode_prompt kwarg that
    overrides them (``text_encoder_out_layers``): its value in ``kwargs`` wins over the families.yaml default."""
    fam = pipeline_family(pipeline_class) or {}
    spec = (fam.get("conditioning") or {}).get(encoder)
    m = _STACKED.fullmatch(str(spec)) if spec is not None else None
    if not m:
        return None
    kwarg = fam.get("stacked_layers")
    if kwarg and (kwargs or {}).get(kwarg) is not None:
        return [int(k) for k in kwargs[kwarg]]
    return [int(k) for k in m.group(1).split(",")]
