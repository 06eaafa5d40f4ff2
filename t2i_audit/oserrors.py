"""The OS errors a user can act on — a full disk, a quota, a read-only medium, no permission — said once
for every command: what happened, where, what to do (``cli.main`` maps them; exit code 2, no traceback).

Writes name the file they were writing (``rundir.naming``), so "where" is the file meant, not a temp file.
What was finished stays on disk: every file is written whole (``rundir.atomic_write_bytes``) and every stage
resumes, so after freeing space the same command continues where it stopped.
"""

from __future__ import annotations

import errno
from typing import Optional

from .errors import AuditError

_RESUME = "what finished is kept: rerun the same command to continue"

# errno → (what happened, what to do)
ACTIONABLE: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device",
                   f"free space on that disk (or write to another disk with --out); {_RESUME}"),
    errno.EDQUOT: ("disk quota exceeded", f"free space within your quota (or write elsewhere with --out); {_RESUME}"),
    errno.EROFS: ("the file system is read-only",
                  "copy the folder to a writable disk and give the copy (or choose an --out on a writable disk); "
                  "commands that only read (verify, compare, predict --from) work on read-only media"),
    errno.EACCES: ("permission denied", "make it readable and writable for this user, or choose a folder you own "
                                        "(--out)"),
    errno.EPERM: ("operation not permitted", "make it writable for this user, or choose a folder you own (--out)"),
}


def explain(e: OSError) -> Optional[AuditError]:
    """The located, actionable AuditError for ``e``, or None when ``e`` is not one a user can act on."""
    if e.errno not in ACTIONABLE:
        return None
    what, todo = ACTIONABLE[e.errno]
    where = e.filename if e.filename is not None else "a file of this command"
    also = f" (and {e.filename2})" if getattr(e, "filename2", None) else ""
    return AuditError(f"{where}{also}: {what} ({errno.errorcode.get(e.errno, e.errno)}); {todo}")


def first_actionable(e: BaseException) -> Optional[AuditError]:
    """:func:`explain` of ``e`` or of the OSError it was raised from (a stage that wraps the error)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError):
            found = explain(e)
            if found is not None:
                return found
        e = e.__cause__ or e.__context__
    return None
