"""The mini track (reports/track/): two mini generators trained with the sweep's recipe at two coverages,
checkpointed in the diffusers-example layout, then tracked end to end by ``t2i-audit track``; the
pre-registered test of t2i_audit/mini/track_preregistered.py read from the two tracks.

    python -m t2i_audit.mini.track_demo train WORK      # the models (≈ 3 CPU-minutes each)
    python -m t2i_audit.mini.track_demo suites WORK     # one suite per model: its unseen pairs held out
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import track_preregistered as prereg


def model_dir(work: Path, coverage: float) -> Path:
    return Path(work) / f"cov{round(coverage * 100):03d}" / "train"


def train_models(work: Path, log=print) -> list[dict]:
    """Train each pre-registered model not trained yet (its final card.json marks it done)."""
    import json

    import torch

    from .sweep import SweepConfig, generator_config
    from .train_generator import train_generator

    torch.set_num_threads(1)
    cards = []
    for cov in prereg.MODELS["coverages"]:
        out = model_dir(work, cov)
        card_path = out / "card.json"
        if card_path.is_file() and json.loads(card_path.read_text()).get("final"):
            log(f"{out}: trained, skipped")
            cards.append(json.loads(card_path.read_text()))
            continue
        cfg = generator_config(SweepConfig(), prereg.MODELS["width"], cov, prereg.MODELS["seed"])

        def progress(msg: str, cov=cov) -> None:
            if not msg.startswith("step") or int(msg.split()[1]) % 250 == 0:
                log(f"[coverage {cov:g}] {msg}")

        cards.append(train_generator(out, cfg, log=progress, checkpoint_every=prereg.MODELS["checkpoint_every"],
                                     save_initial=True))
    return cards


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["train"])
    p.add_argument("work", type=Path)
    a = p.parse_args(argv)
    if a.what == "train":
        train_models(a.work, log=lambda m: print(m, flush=True))


if __name__ == "__main__":
    main()
