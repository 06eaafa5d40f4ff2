"""Many runs on one board, published as data the ecosystem reads (``t2i-audit board``). No torch here.

A board folder (claimed like every output folder, kind ``board``)::

    BOARD/
      board.json                      the index: runs added (their paths, the hashes of the files read),
                                      the files written for each, the snapshots (store.py)
      README.md                       dataset card: YAML ``configs:``, one per table, splits by snapshot + latest
      data/<table>/<run>__<hash>.parquet    per run, written once: questions, images, probes (tables.py)
      data/<table>/<snapshot>.parquet       per snapshot: runs, categories, comparisons (snapshot.py)
      images/<run>__<hash>/           --images folder: PNGs + metadata.jsonl (ImageFolder layout)
      eval_results/<model>/.eval_results/*.yaml   the Hub's eval-results format, once the board has a repo
      index.html + thumbs/            the page (page.py, templates of t2i_audit/report)

Modules, in the order data flows: ``readers`` (every file read, one module), ``settings`` (what separates
runs), ``tables`` (long tables and their schemas), ``ranks`` (the statistics), ``snapshot``, ``card``,
``page``, ``hub``; ``build`` puts them in order; ``cli`` registers the command.
"""

from __future__ import annotations


def build_board(out, runs=(), **kw):
    """See :func:`t2i_audit.board.build.build_board`."""
    from .build import build_board as _build

    return _build(out, runs, **kw)


__all__ = ["build_board"]
