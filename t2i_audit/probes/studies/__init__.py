"""Studies: the questions asked of a run once its per-image arrays exist (arrays in, numbers out).

* ``preregistered`` — the selection study's headline, fixed before its numbers were computed;
* ``costs`` — what a policy spends: denoiser loop iterations, VAE decodes, judge calls, seconds;
* ``selection`` — seed-selection policies (whole images by the judge, scan N / finish K, successive
  halving) simulated per prompt on a run's per-image risks and verdicts;
* ``continuation`` — scanned trajectories continued from their latents instead of regenerated;
* ``trajectory`` — the extra per-image capture the binding study reads (per-head maps, raw slot maps,
  attribute/object overlap per layer, the CFG gap per slot token, x0 colours inside attention regions);
* ``binding`` — AUROC by step per feature family;
* ``pareto`` — success against cost per category, references, controls, the budget choice by nested CV.
"""
