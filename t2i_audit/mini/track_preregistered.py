"""Pre-registered: does decodability rise before success over training? (the mini track, issue 33)

Written and committed 2026-12-06, BEFORE any model of this study was trained: no checkpoint, image,
verdict or activation of it existed. Known then, from another computation (reports/sweep/sweep.json, the
sweep's final models with the same recipe, width 16, seed 0): held-out success 0.10 at coverage 1/2 and 0.83 at
full coverage, and decodability at the headline layer of those final models; nothing about any trajectory
over training. The sweep is being retrained elsewhere while this is written; this study uses the recipe as
committed in t2i_audit/mini/sweep.py at the commit that adds this file.

What is trained (``reports/track/make_track.sh`` runs it all): two mini generators with the sweep's recipe
(``sweep.generator_config(SweepConfig(), width=16, coverage, seed=0)``: 16 px single objects, x0 prediction,
2,500 steps x batch 16, cosine lr, EMA 0.999) at coverage 1/2 and 1 (fraction of the 18 trainable colour-shape
pairs). Each writes ``checkpoint-<step>/`` every 200 steps in the diffusers-example layout (raw and EMA weights),
its untrained pipeline (step 0) and its final pipeline (step 2,500).

What is measured, per checkpoint, by ``t2i-audit track`` with ``--ema`` (the EMA weights, as the final pipeline):

* prompts: the 24 single-object prompts "a <colour> <shape>"; a composition is held out for a model when it
  never trained on it (coverage 1: the 6 ``world.HELDOUT_PAIRS``; coverage 1/2: those and the 9 trainable pairs
  outside its coverage);
* success S(t): the share of held-out images the pixel judge (``mini-pixel``, exact on 16 px renders) passes;
  8 images per prompt, the run's seeds (base seed 0), 10 DDIM steps, guidance 3, 16 px;
* decodability D(t): the UNet ``mid`` block's image stream averaged over space, at the middle sampling step
  (loop index 5 of 10), the conditional half of the CFG batch, read on a replay with seeds NO judged image
  used (samples 1000-1007 of the same seed rule; issue 35: the judged trajectory partly predicts itself);
  linear probes (the probe stage's standardised logistic regression, C = 1) of colour and of shape, out of fold,
  6 folds grouped by composition over all 24 compositions (fold seed 0); D = mean over the held-out
  compositions of the mean out-of-fold probability of the true value (items of the composition, both targets).

The statistic (``t2i_audit.track.timing.rise_lead``):

1. a measure X *rises* when the 95 % CI of X(final) - X(0) lies above 0;
2. its half-rise step t_half(X) is the first checkpoint step with X(t) >= X(0) + (max_t X(t) - X(0)) / 2;
3. the lead = t_half(S) - t_half(D), in training steps; 95 % CI by a paired bootstrap: the held-out
   compositions resampled with replacement (2,000 resamples, numpy default_rng(0)), both curves from each
   resample, the probes not refitted.

The decision, per model: if S does not rise, the question is not testable on that model. Otherwise
"decodability rises before success" when D rises and the lead's CI lies above 0; "after" when its CI lies
below 0 or D does not rise; "not distinguishable at 200-step resolution" otherwise. The headline is the
full-coverage model; the coverage-1/2 model is reported beside it, secondary.

Reported beside it, as exploration (not tested): the step where held-out success first exceeds chance (1/24, a
random colour-shape pair; the first checkpoint whose 95 % CI lies above it, with a bootstrap interval of that
step), seen-pair success, the other blocks and steps, and a text-encoder-only reference (the conditioning
layer's end-of-text state) on the same compositions. Changing this file after the checkpoints exist voids
the test; the study writes this file's sha256 into its results.
"""

from __future__ import annotations

REGISTERED_ON = "2026-12-06"

MODELS = {"width": 16, "seed": 0, "coverages": (0.5, 1.0), "checkpoint_every": 200, "ema": True}
EVALUATION = {"images_per_prompt": 8, "steps": 10, "guidance": 3.0, "size": 16, "seed": 0, "scorer": "mini-pixel"}
DECODABILITY = {
    "block": "mid",            # the UNet mid block (the sweep's pre-registered layer) …
    "step": "middle",          # … at the middle sampling step (loop index n_steps // 2)
    "half": "cond",            # the conditional half of the classifier-free-guidance batch
    "samples": 8,              # replayed per prompt, on seeds no judged image used
    "sample_offset": 1000,     # samples 1000-1007 of the run's seed rule
    "targets": ("c1", "o1"),   # colour and shape slots
    "n_splits": 6,             # folds grouped by composition
    "statistic": "mean out-of-fold probability of the true value",
}
TEST = {
    "measure_success": "held-out success (pixel judge)",
    "measure_decodability": "held-out decodability (DECODABILITY)",
    "rise": "95 % CI of X(final) - X(0) above 0",
    "timing": "half-rise step: first checkpoint with X(t) >= X(0) + (max X - X(0)) / 2",
    "statistic": "lead = t_half(success) - t_half(decodability), training steps",
    "bootstrap": {"unit": "held-out composition", "resamples": 2000, "seed": 0, "ci": 0.95},
    "decision": {"before": "D rises and the lead's CI lies above 0",
                 "after": "the lead's CI lies below 0, or D does not rise",
                 "not distinguishable": "otherwise",
                 "not testable": "S does not rise"},
    "headline_coverage": 1.0,
}
CHANCE = 1 / 24  # a random colour-shape pair passes the pixel judge's single-object question set
