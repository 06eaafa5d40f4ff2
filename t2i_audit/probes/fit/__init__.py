"""Fitting: arrays in, numbers out. ``pipeline`` is the probes' one logistic pipeline (impute where
needed, standardize, L2 logistic regression to convergence; C fixed or by an inner grouped CV) with a
``torch`` and a ``sklearn`` backend; ``logistic`` is the batched solver behind the torch backend.
Importing this package does not import torch."""
