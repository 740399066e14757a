"""SQLite's "unable to open database file" (``SQLITE_CANTOPEN``) with its cause: which file, and why.

SQLite says only that it could not open the file. The causes a host can fix are few: the store's folder on
a read-only file system (a read-only mount, a container's read-only root), a folder or file the user may
not write, a folder that is gone, or the process out of file descriptors (``ulimit -n``) — each reached the
caller as the same 500 "database error: unable to open database file", reads included. A WAL database is
written beside even to read it (its ``-wal`` log and ``-shm`` index are made in the database's folder), so
a read-only folder stops an Iterate or a drive listing as it stops a Push. The cause is found again here,
by asking the operating system what SQLite asked it: opening the folder and the file gives the errno.
"""

from __future__ import annotations

import errno
import os

from connector_ops.kernel.errors import ActionFailed
from connector_ops.kernel.folders import read_only, user
from connector_ops.resources.connection_budget import open_descriptors

_CANTOPEN = "unable to open database file"
#: why a WAL database's folder must be writable, said wherever a folder is found not to be
_WAL_NOTE = ("SQLite makes its -wal log and -shm index beside the database, reads included, so the folder "
             "must be writable")


def is_cannot_open(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver's error or SQLAlchemy's around it) is SQLite's ``SQLITE_CANTOPEN``."""
    orig = getattr(exc, "orig", None) or exc
    return str(getattr(orig, "sqlite_errorname", "")).startswith("SQLITE_CANTOPEN") or _CANTOPEN in str(orig)


#: the descriptors SQLite opens for one connection to a WAL database: the file, its -wal, its -shm, and one
#: for a journal or temporary file; a process with fewer than these left under its limit is out of them
SQLITE_DESCRIPTORS = 4


def descriptor_limit() -> int | None:
    """The process's soft limit of open files (``ulimit -n``), ``None`` when unknown or unlimited."""
    try:
        import resource  # POSIX only

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def out_of_descriptors() -> str | None:
    """"Too many open files" in a host's words when the process is at its limit, else ``None``.

    By the time the error is seen, SQLite has closed what it had opened for the failed connection, so one
    more ``open`` may well succeed; too few left for a connection (:data:`SQLITE_DESCRIPTORS`) is the cause."""
    limit, held = descriptor_limit(), open_descriptors()
    if limit is None or held is None or limit - held >= SQLITE_DESCRIPTORS:
        return None
    return _too_many(limit, held)


def _too_many(limit: int | None, held: int | None) -> str:
    if held is not None and limit is not None:
        holds = f"holds {held} of the {limit} it may hold"
    else:
        holds = f"is at its limit of {limit}" if limit is not None else "is at its limit"
    return (f"too many open files: the process {holds} (ulimit -n); raise the limit (ulimit -n, "
            f"LimitNOFILE= in a systemd unit, --ulimit nofile= for a container)")


def _probe(path: str, flags: int) -> int | None:
    """The errno of opening ``path`` with ``flags`` now (closed at once), ``None`` when it opens."""
    try:
        os.close(os.open(path, flags))
    except OSError as exc:
        return exc.errno
    return None


def reason(path: str) -> str | None:
    """Why the database file at ``path`` cannot be opened, in words a host can act on, or ``None`` when
    nothing found now explains it (the fault was passing)."""
    folder = os.path.dirname(os.path.abspath(path))
    code = _probe(folder, os.O_RDONLY)
    if code is None and os.path.exists(path):
        code = _probe(path, os.O_RDWR)
    if code == errno.EMFILE:  # all taken: even listing them would fail
        return _too_many(descriptor_limit(), descriptor_limit())
    if short := out_of_descriptors():
        return short
    if code == errno.ENFILE:
        return "too many open files on the host: the system's table of open files is full (fs.file-max)"
    if code == errno.ENOENT:
        return f"its folder {folder} does not exist"
    if code == errno.EROFS or read_only(folder):
        return f"its folder {folder} is on a read-only file system; {_WAL_NOTE}"
    if code == errno.EACCES or not os.access(folder, os.W_OK | os.X_OK):
        return f"permission denied for user {user()} on {folder} or the file; {_WAL_NOTE}"
    if code is not None:
        return os.strerror(code)
    return None


def cannot_open_error(path: str) -> ActionFailed:
    """The error for SQLite's ``SQLITE_CANTOPEN`` on the database file at ``path``: the file named, with the
    cause when the operating system still shows one."""
    why = reason(path)
    return ActionFailed(f"cannot open the database {path}" + (f": {why}" if why else
                                                             " (SQLite: unable to open database file)"))

