"""SQLite's "database or disk is full" (``SQLITE_FULL``) as the error a person can act on.

The floor (``CONNECTOR_OPS_MIN_FREE_DISK``) keeps our own writes from filling the disk; it is off at 0, and
another process may take the space anyway. SQLite then fails the statement with ``database or disk is
full``, which reached the caller as a 500 with no body, or a bare "database error", saying neither which
file nor how much room there was. A write that meets it is rolled back like any failed write; this names
the database, the size of its log (the ``-wal`` file, whose copy into the database at a checkpoint is
what a full disk most often stops) and the free space, in the floor's words (:func:`~connector_ops.kernel.
disk.disk_full`).
"""

from __future__ import annotations

import os

from connector_ops.kernel.disk import DiskFull, disk_full, shown_size

_FULL = "database or disk is full"


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver's error, or SQLAlchemy's around it) is SQLite's ``SQLITE_FULL``."""
    return _FULL in str(getattr(exc, "orig", None) or exc)


def full_error(path: str, min_free: int, done: str = "the write was rolled back, nothing was written") -> DiskFull:
    """The error for SQLite's ``SQLITE_FULL`` on the database file at ``path``."""
    try:
        log = shown_size(os.path.getsize(f"{path}-wal"))
    except OSError:
        log = "none"
    return disk_full(os.path.dirname(os.path.abspath(path)), min_free,
                     detail=f"the database {path}, its log {path}-wal: {log}", done=done)
