"""SQLite write-ahead-log checkpoints in a background thread, off the path of the store's writers.

In WAL mode a commit appends pages to the ``-wal`` file; a checkpoint copies them into the database file
and ``fsync``s both (≈ 0.4 s per 100 MB here). SQLite's automatic checkpoint runs it inside the commit
that crosses 1000 pages, so a Join or a Validate writing a million rows waited for it before returning.
The store's connections turn that off (``wal_autocheckpoint=0``, :mod:`.engines`) and hand the work to
this thread instead: after a write transaction ends, if the log holds at least ``WAL_BYTES``, the thread
runs the same passive checkpoint on its own connection (the ``sqlite3`` module lets go of the GIL while
SQLite works). Nothing about visibility or durability changes: the rows are committed and visible at
the commit, as before, and with ``synchronous=NORMAL`` a commit in WAL mode was never ``fsync``ed by
itself. A passive checkpoint waits for no reader or writer; one that cannot finish now (a long reader)
copies what it can, and the next write asks again. A process that ends leaves the log to the next
connection (the last one to close a database checkpoints it, as SQLite always does).
"""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
from pathlib import Path

#: the log size from which a checkpoint is asked for (SQLite's own default: 1000 pages of 4 KiB)
WAL_BYTES = 4 << 20

_queue: queue.Queue[str] = queue.Queue()
_pending: set[str] = set()
_lock = threading.Lock()
_thread: threading.Thread | None = None


def after_write(path: str) -> None:
    """A write transaction on the SQLite file at ``path`` ended: checkpoint in the background if the log
    is large enough (and no checkpoint of that file is waiting already)."""
    global _thread
    try:
        size = os.stat(path + "-wal").st_size
    except OSError:
        return
    if size < WAL_BYTES:
        return
    with _lock:
        if path in _pending:
            return
        _pending.add(path)
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="sqlite-checkpoints", daemon=True)
            _thread.start()
    _queue.put(path)


def _run() -> None:
    while True:
        path = _queue.get()
        with _lock:
            _pending.discard(path)
        try:
            checkpoint(path)
        finally:
            _queue.task_done()


def checkpoint(path: str) -> None:
    """One passive checkpoint of the SQLite file at ``path`` (nothing if it cannot be opened)."""
    with contextlib.suppress(sqlite3.Error):
        uri = Path(path).resolve().as_uri() + "?mode=rw"  # a file removed meanwhile is not created again
        conn = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            conn.close()


def wait() -> None:
    """Until every checkpoint asked for so far is done (benchmarks, tests)."""
    _queue.join()
