"""SQLite's "database or disk is full" (``SQLITE_FULL``), and its "disk I/O error" on a full disk, as the
error a person can act on.

The floor (``CONNECTOR_OPS_MIN_FREE_DISK``) keeps our own writes from filling the disk; it is off at 0, and
another process may take the space anyway. SQLite then fails the statement with ``database or disk is
full``, which reached the caller as a 500 with no body, or a bare "database error", saying neither which
file nor how much room there was. A write that meets it is rolled back like any failed write; this names
the database, the size of its log (the ``-wal`` file, whose copy into the database at a checkpoint is
what a full disk most often stops) and the free space, in the floor's words (:func:`~connector_ops.kernel.
disk.disk_full`).

A disk with a few KiB left fails SQLite before its log does: the ``-shm`` index that every connection to a
WAL database maps grows in 32 KiB steps, and growing it (or syncing, or truncating the log) on a full disk
is ``SQLITE_IOERR_*``, "disk I/O error" — reads included, since a reader maps the index too. That reached
the caller as a bare "database error: disk I/O error". An I/O error while the database's disk has almost
nothing free (:data:`NEAR_FULL`) is taken for what it is; with room left it stays SQLite's words, a real
I/O error (a failing disk, a network file system gone) being nothing to free space for.
"""

from __future__ import annotations

import os

from connector_ops.kernel.disk import DiskFull, disk_full, free_space, shown_size

_FULL = "database or disk is full"
_IOERR = "disk I/O error"
#: an I/O error with less than this free on the database's disk is the disk being full: the room for the
#: ``-shm`` index's next 32 KiB step and a transaction's first log frames, with margin for what the failed
#: write gave back on its way out
NEAR_FULL = 1 << 20


def is_full(exc: BaseException, path: str | None = None) -> bool:
    """Whether ``exc`` (a driver's error, SQLAlchemy's around it, or a loader's report of one) is SQLite's
    ``SQLITE_FULL`` or, for the database file at ``path``, an ``SQLITE_IOERR*`` while its disk has less
    than :data:`NEAR_FULL` free."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig)
    if _FULL in text or getattr(orig, "sqlite_errorname", None) == "SQLITE_FULL":
        return True
    io_error = str(getattr(orig, "sqlite_errorname", "")).startswith("SQLITE_IOERR") or _IOERR in text
    if not io_error or path is None:
        return False
    try:
        return free_space(os.path.dirname(os.path.abspath(path))) < NEAR_FULL
    except OSError:
        return False


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
