"""SQLite write-ahead-log checkpoints in a background thread, off the path of the store's writers.

In WAL mode a commit appends pages to the ``-wal`` file; a checkpoint copies them into the database file
and ``fsync``s both (≈ 0.4 s per 100 MB here). SQLite's automatic checkpoint runs it inside the commit
that crosses 1000 pages, so a Join or a Validate writing a million rows waited for it before returning.
The store's connections turn that off (``wal_autocheckpoint=0``, :mod:`.engines`) and hand the work to
this thread instead: after a write transaction ends, if the log holds more than ``WAL_BYTES``, the thread
runs the same passive checkpoint on its own connection (the ``sqlite3`` module lets go of the GIL while
SQLite works). Nothing about visibility or durability changes: the rows are committed and visible at
the commit, as before, and with ``synchronous=NORMAL`` a commit in WAL mode was never ``fsync``ed by
itself. A passive checkpoint waits for no reader or writer; one that cannot finish now (a long reader)
copies what it can, and the next write asks again. A process that ends leaves the log to the next
connection (the last one to close a database checkpoints it, as SQLite always does).

SQLite starts the log over only when a write begins on a log that is wholly checkpointed; otherwise the
write appends to it, and the file keeps its largest size. Writes that follow each other faster than the
thread (a pipeline's steps in one process, a Map and a clean) would each append: four of them left four
times one write's log on disk. So a write waits first for a checkpoint still running on its file
(:func:`before_write`); SQLite's own checkpoint made the next writer wait the same way, inside the commit
before it.

The log's size is read from the ``-wal`` file's length, which is right only because the connections also
set ``journal_size_limit`` to ``WAL_BYTES``: at the first commit after SQLite starts the log over, it cuts
the file down to that limit (or to that commit's frames, if more). Without it the file keeps its largest
size, so after one large write every small one (each Iterate call stores its cursor) asked for a
checkpoint and its ``fsync``, and the next write waited for it: SQLite Iterate ran 7–15 % slower. The
shared-memory index holds the exact count, but opening and closing that file from Python drops the locks
SQLite holds on it (https://www.sqlite.org/howtocorrupt.html, 2.2), so we never touch it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
from pathlib import Path

#: the log size above which a checkpoint is asked for (SQLite's own default: 1000 pages of 4 KiB), and
#: the connections' ``journal_size_limit``
WAL_BYTES = 4 << 20

#: the pragmas every connection that writes to a store file sets, beside its own
WRITER_PRAGMAS = ("wal_autocheckpoint=0", f"journal_size_limit={WAL_BYTES}")

#: how long a write waits for a checkpoint of its file before it goes on regardless (and appends to the log)
SETTLE_SECONDS = 60.0

_queue: queue.Queue[str] = queue.Queue()
_pending: set[str] = set()
_unfinished: dict[str, int] = {}  # checkpoints asked for and not yet done, per file
_lock = threading.Lock()
_finished = threading.Condition(_lock)
_thread: threading.Thread | None = None


def after_write(path: str) -> None:
    """A write transaction on the SQLite file at ``path`` ended: checkpoint in the background if the log
    has grown past ``WAL_BYTES`` since SQLite last started it over (and no checkpoint of that file is
    waiting already)."""
    global _thread
    try:
        size = os.stat(path + "-wal").st_size
    except OSError:
        return
    if size <= WAL_BYTES:  # the limit itself is the length of a log cut down after a restart
        return
    with _lock:
        if path in _pending:
            return
        _pending.add(path)
        _unfinished[path] = _unfinished.get(path, 0) + 1
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
            with _finished:
                _unfinished[path] -= 1
                if not _unfinished[path]:
                    del _unfinished[path]
                _finished.notify_all()
            _queue.task_done()


def before_write(path: str) -> None:
    """A write transaction on the SQLite file at ``path`` is about to begin: wait until no checkpoint of
    that file is queued or running, so that the log is wholly copied and SQLite can start it over."""
    with _finished:
        _finished.wait_for(lambda: path not in _unfinished, timeout=SETTLE_SECONDS)


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
