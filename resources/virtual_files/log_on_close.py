"""Closing a SQLite connection without its checkpoint: for a connection whose files were replaced under it.

In WAL mode the last connection to close a database copies its ``-wal`` log into the database file
(SQLite's checkpoint on close) and then deletes the file named ``<db>-wal``. For a connection left on a
replaced store (:mod:`.store_file`) both are harm: a backup copied over the live file (``cp``, the same
inode) with the log removed gets the old log written back into it — the restore undone, and commits other
processes made on the restored file since overwritten page by page; a file renamed into place gets its
new ``-wal``, still in use by other processes, deleted by name. ``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`` makes
the close do neither: the old log stays unapplied, and goes with the last descriptor on it.

Python 3.12 sets it with ``Connection.setconfig``. Python 3.11's ``sqlite3`` has no way to, so there it is
set through ``ctypes`` on the connection's ``sqlite3 *`` handle — the first field after the object header of
CPython 3.11's connection object — and only once ``sqlite3_db_filename`` of that handle has answered the
file the caller names, so that a layout other than the one expected is never written through. The library
is the one ``_sqlite3`` uses (its own file where it links SQLite, else the process's symbols), checked by
its version; ``sqlite3_db_config`` is variadic, so only its two fixed arguments are declared (ctypes then
passes the rest as variadic arguments, which Apple's arm64 passes on the stack). Where none of that is
possible, a warning says so once: the old log may then be copied back into a restored file.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sqlite3
import sys
from typing import Any

_log = logging.getLogger(__name__)

#: sqlite3.h: SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE
NO_CKPT_ON_CLOSE = 1006


def keep_log_on_close(conn: Any, path: str) -> bool:
    """Make ``conn`` (a ``sqlite3.Connection`` of the file at ``path``) close without checkpointing or
    deleting its log. Whether that was done (``False``: a Python where it cannot be, said once in the log,
    or not a connection)."""
    if not isinstance(conn, sqlite3.Connection):
        return False
    try:
        if hasattr(conn, "setconfig"):  # Python 3.12+
            conn.setconfig(NO_CKPT_ON_CLOSE, True)
            return True
        done = _by_handle(conn, path)
    except (sqlite3.Error, OSError, AttributeError, ValueError):
        done = False
    if not done:
        _cannot_once(path)
    return done


_TOLD = False


def _cannot_once(path: str) -> None:
    """Say once per process that a connection left on a replaced store could not be kept from writing its
    old log back (docs/deployment.md: restore by renaming a copy into place, never ``cp`` over the file)."""
    global _TOLD
    if not _TOLD:
        _TOLD = True
        _log.warning("%s was replaced under open connections, and this Python (%s %s) cannot keep them from "
                     "copying their old log into it as they close: restore a backup by renaming a copy into "
                     "place or with sqlite3's .restore, never by cp over the file (docs/deployment.md)",
                     path, sys.implementation.name, sys.version.split()[0])


def _by_handle(conn: sqlite3.Connection, path: str) -> bool:
    """Python 3.11 (CPython): the flag set on ``conn``'s handle, once the handle names ``path``."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        return False
    lib = _library()
    handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
    if not handle:
        return False
    named = lib.sqlite3_db_filename(handle, b"main")
    if not named or os.path.realpath(os.fsdecode(named)) != os.path.realpath(path):
        return False
    out = ctypes.c_int(0)
    done = lib.sqlite3_db_config(handle, NO_CKPT_ON_CLOSE, ctypes.c_int(1), ctypes.byref(out))
    return done == 0 and out.value == 1


_LIB: ctypes.CDLL | None = None


def _library() -> ctypes.CDLL:
    """The SQLite library the ``sqlite3`` module uses, with the two functions' prototypes: ``_sqlite3``'s own
    file (which links SQLite or holds it), else the symbols of the process, else the system's library;
    the first whose ``sqlite3_libversion`` is the version ``sqlite3`` runs (``OSError`` if none)."""
    global _LIB
    if _LIB is None:
        import _sqlite3

        places = [getattr(_sqlite3, "__file__", None), None, ctypes.util.find_library("sqlite3")]
        for place in places:
            try:
                lib = ctypes.CDLL(place)
                lib.sqlite3_libversion.restype = ctypes.c_char_p
                if lib.sqlite3_libversion().decode() != sqlite3.sqlite_version:
                    continue
                lib.sqlite3_db_filename.restype = ctypes.c_char_p
                lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
                lib.sqlite3_db_config.restype = ctypes.c_int
                lib.sqlite3_db_config.argtypes = [ctypes.c_void_p, ctypes.c_int]  # then "...": variadic
            except (OSError, AttributeError):
                continue
            _LIB = lib
            break
        else:
            raise OSError("no SQLite library of the version the sqlite3 module runs")
    return _LIB
