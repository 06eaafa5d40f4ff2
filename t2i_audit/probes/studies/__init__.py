"""Studies: the questions asked of a run once its per-image arrays exist (arrays in, numbers out).
The selection policies, their costs and their execution live in ``t2i_audit.select`` (the ``select`` command's
room); a study imports them from there, never the reverse.

* ``preregistered`` — the selection study's headline, fixed before its numbers were computed;
* ``trajectory`` — the extra per-image capture the binding study reads (per-head maps, raw slot maps,
  attribute/object overlap per layer, the CFG gap per slot token, x0 colours inside attention regions);
* ``binding`` — AUROC by step per feature family;
* ``pareto`` — success against cost per category, references, controls, the budget choice by nested CV.
"""
