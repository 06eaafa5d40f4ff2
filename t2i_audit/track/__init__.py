"""Training checkpoints audited over training (``t2i-audit track``) and from inside a training loop
(:class:`TrackCallback`): composition and decodability over the training step, one normal run per checkpoint.

No torch at import; ``TrackCallback`` is imported on first use.
"""

from __future__ import annotations


def __getattr__(name: str):  # PEP 562: `from t2i_audit.track import TrackCallback` without importing torch here
    if name == "TrackCallback":
        from .callback import TrackCallback

        return TrackCallback
    raise AttributeError(name)


__all__ = ["TrackCallback"]
