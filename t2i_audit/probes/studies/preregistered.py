"""The headline of the selection study, fixed in code BEFORE any number of the 280 x 8 mini run was computed.

Written 2026-12-05, before ``t2i-audit run --model mini --prompts prompts/mini.yaml -n 8`` had finished
generating, so no verdict, risk or AUROC of that run had been seen. Known then, from a different run
(the issue's 280 x 4 run, the same base seed: its samples 0-3 are the same seeds): the ``probe`` family
reads spatial layout at 20 % of the steps with AUROC 0.817, best 1 of 4 at 20 % gave 0.494 against
0.275 for one random seed and 0.441 for best of 2 whole images.

Everything else the study reports (other families, steps, policies, categories, budgets) is exploration:
its p-values are Holm-corrected together (``pareto.holm``) and it is labelled so in selection.json,
the report and the README. Changing this file after the numbers exist voids the headline; the study
writes this file's sha256 into selection.json so a reader can check it against the commit.
"""

from __future__ import annotations

REGISTERED_ON = "2026-12-05"

HEADLINE = {
    "category": "spatial",
    # per_image.FAMILIES "probe": cross-attention composition statistics of every grid + pooled block
    # activations + the prompt's one-hot constituents, logistic with C by inner grouped CV
    "family": "probe",
    "fraction": 0.2,  # step_at(0.2, 20) = loop index 3: 4 of 20 iterations read
    # scan 6 seeds to 20 %, continue the lowest-risk one from its scanned latents (no judge call):
    # 6 * 4 + 16 = 40 denoiser loop iterations per prompt, the goal's budget (half of best of 4)
    "policy": {"kind": "scan", "n_of": 6, "keep": 1, "continued": True},
    # the test: success minus the whole-image best-of-N-by-the-final-judge curve, linearly
    # interpolated at the same loop iterations (40 = best of 2), paired over prompts
    "compare_to": "whole-image best-of-N by the final judge at equal loop iterations",
    "evaluation": ("out-of-fold risks, 5 folds grouped by twin group (a composition and its swap twin "
                   "together: the prompts are unseen), split seed 0; per prompt the expectation over every "
                   "6-subset of its 8 seeds; 95 % CI by bootstrap over twin groups, 2000 resamples"),
    "alpha": 0.05,
}
