"""The mini world: an embedded text-to-image world with ground truth.

* :mod:`.world` — PIL renderer (6 colours x 4 shapes, one or two objects, left of / right of /
  above / below), truth scenes, hard negatives, captions = ``prompts/mini.yaml`` texts.
* :mod:`.pixel_judge` — exact palette judge (scorer ``mini-pixel``).
* :mod:`.train_judge` — open_clip judge trained on every composition (scorer ``mini-judge``).
* :mod:`.train_generator` — StableDiffusionPipeline (pixel-space UNet, identity VAE, own CLIP
  text encoder) trained with ``world.HELDOUT_PAIRS`` never shown (model card ``mini``).
* :mod:`.evaluate` — judge accuracy per category on fresh renders; generator success by the
  pixel judge, seen vs held-out. CLI: ``t2i-audit mini --help``.

Shipped weights live in ``weights/`` (``generator/``, ``judge/``, ``pixel/card.json``); each
``card.json`` records seed, steps, CPU time, held-out compositions and measured accuracy.
"""
