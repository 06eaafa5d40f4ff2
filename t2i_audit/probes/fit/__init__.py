"""Fitting: arrays in, numbers out. ``pipeline`` is the probes' one logistic pipeline (impute where
needed, standardize, L2 logistic regression to convergence; C fixed or by an inner grouped CV) with a
``torch`` and a ``sklearn`` backend; ``logistic`` is the batched solver behind the torch backend.
``linear`` is the prompt-level probes on stored activations (decodability with chance and control,
failure prediction against a prompt-only baseline, decodability ↔ success, CV grouped by composition);
``per_image`` is the per-image failure probes on early-step features (design matrices, nested CV,
export/apply as plain arrays, comparison with the references). Importing this package does not import
torch."""
