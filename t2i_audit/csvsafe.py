"""CSV cells that a spreadsheet shows as text, never runs as a formula.

Prompt and question texts come from users' files, and a spreadsheet evaluates a cell that
starts with ``=``, ``+``, ``-`` or ``@`` (and, in some, a leading tab or carriage return) as a
formula: ``=HYPERLINK(...)`` in a prompt would run when someone opens ``results.csv``. As OWASP's
CSV-injection advice says, such a text cell gets a leading single quote. Numbers stay numbers
(``-0.5`` is a value, not a formula). The label page's JavaScript export does the same
(``csvField`` in report/templates/label.html.j2).
"""

from __future__ import annotations

from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    """``value`` with a leading ``'`` if it is text a spreadsheet would read as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def to_csv(df) -> str:
    """``df.to_csv(index=False)`` with every text cell passed through :func:`safe_cell`."""
    out = df.copy()
    for c in out.columns:
        if out[c].dtype == object or str(out[c].dtype) in ("string", "str"):
            out[c] = out[c].map(safe_cell)
    out.columns = [safe_cell(str(c)) for c in out.columns]
    return out.to_csv(index=False)
