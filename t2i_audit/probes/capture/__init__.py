"""Capture: run (part of) a model and keep what it computed, as arrays in a run directory.

``pipeline_text`` runs a pipeline's own ``encode_prompt`` with recording tokenizers and encoder hooks;
``activations`` stores the text-encoder states it yields (``activations/<encoder>/``); ``denoiser``
replays a run's generation with forward hooks on the UNet / transformer blocks (``activations/denoiser/``);
``attention`` records cross-attention maps and ``preview`` the x0 previews at chosen loop steps; ``early``
replays every image of a run for its first steps with all of these attached and stores per-image early
features (``activations/early/``, reduced by ``features.map_features``). Nothing here fits anything.
Importing this package does not import torch (the modules import it where they run a model).
"""
