"""``t2i-audit select``: seed selection — scan N seeds to an early step, rank them by a fitted probe, continue
the best K from their latents, judge the finished images, and count what it cost.

The room, in the order a selection runs (each module imports only those before it, and nothing of
``probes/studies``, which imports from here):

* ``cost`` — what a policy spends (denoiser loop iterations, VAE decodes, judge calls) and its seconds;
* ``policies`` — the policies (whole images, scan N / keep K, successive halving) and their expected success
  simulated on a run that generated every seed (averaged over every subset of seeds);
* ``choose`` — which policy for a budget, by nested CV, never on the prompts it is scored on;
* ``minimums`` — the seeds per prompt and prompt groups a study or a budget's choice needs, and the refusal;
* ``freshness`` — scanned seeds the probe's own run never generated;
* ``scan`` — replay to the scan step, risks from the fitted probe (``predict --early`` stops here);
* ``rank`` — which scanned seeds each role finishes (kept, random, whole images at the same cost);
* ``continuation`` — a scanned trajectory continued from its latents, not regenerated;
* ``execute`` — scan → rank → continue → finish, chunk by chunk, resumably, with a counter of what was spent;
* ``command`` — ``select --of N --keep K --at F``; ``budget`` — ``select --budget B``.
"""
