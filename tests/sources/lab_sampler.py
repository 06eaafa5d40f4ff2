"""A lab's own sampling loop, as `--model python:tests.sources.lab_sampler:sample` imports it: the mini world's
renderer seeded by the seed t2i-audit hands over (the contract of t2i_audit/sources/callable.py)."""

import random

CALLS: list[dict] = []  # what each call received (in-process tests read it)


def sample(prompts, seeds, settings):
    from t2i_audit.mini.world import parse_caption, render

    CALLS.append({"prompts": list(prompts), "seeds": list(seeds), "settings": dict(settings)})
    return [render(parse_caption(text, random.Random(seed)), settings.get("size") or 32)
            for text, seed in zip(prompts, seeds)]
