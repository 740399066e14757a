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

from connector_ops.kernel.disk import DiskFull, disk_full, free_space, shown_size

_FULL = "database or disk is full"


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver's error, or SQLAlchemy's around it) is SQLite's ``SQLITE_FULL``."""
    return _FULL in str(getattr(exc, "orig", None) or exc)


def sqlite_temp_dir() -> str | None:
    """The folder SQLite's temporary files go to on Unix (an index's sort, VACUUM's copy of the database):
    ``SQLITE_TMPDIR``, ``TMPDIR``, then ``/var/tmp``, ``/usr/tmp``, ``/tmp``, the first that is a writable
    folder."""
    candidates = [os.environ.get("SQLITE_TMPDIR"), os.environ.get("TMPDIR"), "/var/tmp", "/usr/tmp", "/tmp"]
    return next((d for d in candidates if d and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)), None)


def full_error(path: str, min_free: int, done: str = "the write was rolled back, nothing was written") -> DiskFull:
    """The error for SQLite's ``SQLITE_FULL`` on the database file at ``path``. A sort or a VACUUM that fills
    SQLite's temporary folder says "database or disk is full" too: when that folder is on another disk, it is
    named with its free space — else the message sent people to free space on a disk with plenty."""
    try:
        log = shown_size(os.path.getsize(f"{path}-wal"))
    except OSError:
        log = "none"
    folder = os.path.dirname(os.path.abspath(path))
    detail = f"the database {path}, its log {path}-wal: {log}"
    temp = sqlite_temp_dir()
    try:
        elsewhere = temp is not None and os.stat(temp).st_dev != os.stat(folder).st_dev
        temp_free = shown_size(free_space(temp)) if elsewhere and temp is not None else ""
    except OSError:
        elsewhere = False
    if elsewhere:
        detail += (f"; SQLite's temporary files (an index's sort, gc's VACUUM) go to {temp}, another disk: "
                   f"{temp_free} free (SQLITE_TMPDIR or TMPDIR moves them)")
    return disk_full(folder, min_free, detail=detail, done=done)
