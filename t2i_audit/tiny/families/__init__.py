"""Tiny offline families beyond the first five (t2i_audit/tiny/__init__.py), one module each.

A module defines ``CARDS`` (tiny model cards, as in ``tiny.TINY_MODELS``) and ``BUILDERS``
(family name -> ``build(name) -> components``); ``t2i_audit.tiny`` registers every module here
and hashes its source into the tiny folder's fingerprint. Heavy imports stay inside builders.
"""
