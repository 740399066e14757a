"""SQLite write-ahead-log checkpoints in a background thread, off the path of the store's writers.

In WAL mode a commit appends pages to the ``-wal`` file; a checkpoint copies them into the database file
and ``fsync``s both (≈ 0.4 s per 100 MB here). SQLite's automatic checkpoint runs it inside the commit
that crosses 1000 pages, so a Join or a Validate writing a million rows waited for it before returning.
The store's connections turn that off (``wal_autocheckpoint=0``, :mod:`.engines`) and hand the work to
this thread instead: after a write transaction ends, if the log holds at least ``WAL_BYTES``, the thread runs
the same passive checkpoint on a connection it keeps per file (:func:`checkpoint`; the ``sqlite3`` module lets
go of the GIL while SQLite works). Nothing about visibility or durability changes: the rows are committed and
visible at the commit, as before, and with ``synchronous=NORMAL`` a commit in WAL mode was never ``fsync``ed
by itself. A passive checkpoint waits for no reader or writer; one that cannot finish now (a long reader)
copies what it can, and the next write asks again. A process that ends leaves the log to the next connection
(the last one to close a database checkpoints it, as SQLite always does).

SQLite starts the log over only when a write begins on a log that is wholly checkpointed; otherwise the
write appends to it, and the file keeps its largest size. Writes that follow each other faster than the
thread (a pipeline's steps in one process, a Map and a clean) would each append: four of them left four
times one write's log on disk. So a write waits first for a checkpoint still running on its file
(:func:`before_write`); SQLite's own checkpoint made the next writer wait the same way, inside the commit
before it.

"The log" is what SQLite wrote since it last started the log over (:func:`log_bytes`), not the ``-wal``
file's length: the file keeps its largest length, so after one large write every small one (each Iterate
call stores its cursor) asked for a checkpoint and its ``fsync``, and the next write waited for it
(SQLite Iterate 7–15 % slower). Cutting the file down instead (``journal_size_limit``) made the next large
write append to a new file rather than overwrite the old one: a Join and its checkpoint 0.1–0.2 s slower.

A file's checkpoint connection lasts while an engine has the file open (:func:`opened`, :func:`forget`). An
engine closed to make room (:mod:`.engines`) may leave a checkpoint of its file queued, or running: the thread
closes the connection after it, never the engine's close, which holds the lock every thread takes to get an
engine and would wait there for a running checkpoint to end; a checkpoint queued and not yet begun opened its
connection after such a close, and nothing closed it again.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import sqlite3
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from connector_ops.kernel.forks import abandon, in_child
from connector_ops.resources.virtual_files.file_identity import Identity, with_log
from connector_ops.resources.virtual_files.log_on_close import keep_log_on_close

#: the log size from which a checkpoint is asked for (SQLite's own default: 1000 pages of 4 KiB)
WAL_BYTES = 4 << 20

#: how long a write waits for a checkpoint of its file before it goes on regardless (and appends to the log);
#: and a close (:func:`closed`) for the connections of the files it let go of, all together
SETTLE_SECONDS = 60.0

#: seconds a checkpoint connection waits for a lock of its file (SQLite's busy timeout, as the store's connections)
BUSY_SECONDS = 60
#: milliseconds each try of a ``TRUNCATE`` checkpoint waits for the file's readers and writer (:func:`checkpoint`)
TRY_MS = 100

_log = logging.getLogger(__name__)

#: what the thread is asked to do, in order: ``(path, True)`` checkpoint that file, ``(path, False)`` close its
#: connection (:func:`forget`), an event: set it (:func:`wait`). A ``SimpleQueue``: its ``put`` is one call
#: into C, where ``queue.Queue``'s runs Python code under its lock, which a signal's handler could leave held
_queue: queue.SimpleQueue[tuple[str, bool] | threading.Event] = queue.SimpleQueue()
_pending: set[str] = set()
_unfinished: dict[str, int] = {}  # checkpoints asked for and not yet done, per file
#: the files an engine has open, with how many engines (two spellings of one path make two): a file no engine
#: has open keeps no checkpoint connection
_opened: dict[str, int] = {}
_closing: dict[str, int] = {}  # closes asked for (:func:`forget`) and not yet done, per file
#: taken as ``with _lock``, never ``with _finished`` (:func:`before_write`): the condition's ``__enter__`` and
#: ``__exit__`` are Python functions, and a signal's handler that raises as ``__exit__`` is entered (Jupyter's
#: Stop in the main thread, which begins every write) left the lock held: every later write of the process,
#: and the thread, waited for it for ever
_lock = threading.Lock()
_finished = threading.Condition(_lock)
_thread: threading.Thread | None = None

# the -wal file's layout (https://www.sqlite.org/walformat.html): a 32-byte header (magic, format, page
# size, checkpoint sequence, two salts), then frames of a 24-byte header (salts at 8-16) and one page
_WAL_MAGICS = (0x377F0682, 0x377F0683)
_WAL_HEADER, _FRAME_HEADER, _SALTS = 32, 24, slice(16, 24)
#: SQLite's page size unless a database says otherwise (``PRAGMA page_size``)
_DEFAULT_PAGE_SIZE = 4096
#: pages a commit writes to the log besides the new ones (the header, the schema, the catalog's rows, a
#: b-tree's parents): a margin of the estimate before the commit
_REWRITTEN_PAGES = 16
_NO_SALTS = bytes(8)


def after_write(path: str) -> None:
    """A write transaction on the SQLite file at ``path`` ended: checkpoint in the background if the log
    is large enough (and no checkpoint of that file is waiting already)."""
    if log_bytes(path) < WAL_BYTES:
        return
    with _lock:
        if path in _pending:
            return
        # queued before it is counted: an interrupt between the two leaves a checkpoint nobody waits for,
        # where a count first, then no checkpoint, made every later write wait SETTLE_SECONDS (it runs in
        # the pool's check-in, in the main thread, where Jupyter's Stop lands)
        _ask((path, True))
        _pending.add(path)
        _unfinished[path] = _unfinished.get(path, 0) + 1


def _ask(job: tuple[str, bool] | threading.Event) -> None:
    """Queue ``job`` for the thread (:data:`_queue`), started if need be (under :data:`_lock`)."""
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_run, name="sqlite-checkpoints", daemon=True)
        _thread.start()
    _queue.put(job)


def log_bytes(path: str, *, writing: bool = False) -> int:
    """How many bytes of log SQLite has written to ``path``'s ``-wal`` file since it last started it over
    (0 if there is no log); ``writing``: with those of the transaction under way, some of which have no
    salts yet (once a transaction rewrites a frame, SQLite writes its next ones with zeros there and fills
    them in at the commit: 959 of a Push's 5,188 frames had them).

    Those frames carry the header's salts; SQLite writes them from the start of the file, and frames left
    from before the restart carry older ones, so a binary search over the frames' salts finds where the log
    ends (≈ 17 reads of 8 bytes for 1M rows' log). The ``-wal`` file is safe to open and close here: SQLite
    keeps no lock on it (its locks are on the database and ``-shm`` files, whose locks closing a descriptor
    of the same file would drop: sqlite.org/howtocorrupt.html §2.2). A frame being written as we read
    can only shift the count by that frame.
    """
    try:
        with open(path + "-wal", "rb", buffering=0) as wal:
            head = wal.read(_WAL_HEADER)
            if len(head) < _WAL_HEADER:
                return 0
            magic, _format, page_size = struct.unpack_from(">III", head)
            if magic not in _WAL_MAGICS:
                return 0
            frame = _FRAME_HEADER + (page_size if page_size > 1 else 65536)  # 1 stands for 64 KiB
            ours = (head[_SALTS], _NO_SALTS) if writing else (head[_SALTS],)
            fd = wal.fileno()
            low, high = 0, (os.fstat(fd).st_size - _WAL_HEADER) // frame  # frames [0, low) are the log's
            while low < high:
                middle = (low + high) // 2
                if os.pread(fd, 8, _WAL_HEADER + middle * frame + 8) in ours:
                    low = middle + 1
                else:
                    high = middle
            return low * frame
    except OSError:
        return 0


def checkpoint_growth(path: str, free_pages: int, page_size: int, page_count: int | None = None,
                      cache_pages: int = 0) -> int:
    """The disk space the write under way on the SQLite file at ``path`` will still take beyond its log: the
    checkpoint after it copies the log's pages into the database file, and the pages past the file's end
    grow it by as much again as they took in the log (a 33 MiB Push: 34 MiB of log, then +29 MiB of file).

    During the write (``page_count`` unknown) every page in the log counts but the ``free_pages`` the
    database had when the write began (reused before the file grows): an upper bound. Before its commit,
    ``page_count`` (``PRAGMA page_count``: the database's size with the write) gives the growth exactly;
    the pages still dirty in the page cache (at most ``cache_pages``), not yet in the log, are written there
    at the commit (with a few others: :data:`_REWRITTEN_PAGES`). Which of the logged frames are new pages
    cannot be told (a write that first rewrote existing pages, spilled to the log, then added new ones kept
    in the cache), so the whole cache counts: taking the new pages still unlogged as ``growth - logged``
    undercut the floor by up to the cache."""
    try:
        on_disk = os.stat(path).st_size
    except OSError:
        on_disk = 0
    if page_count is None:
        logged = log_bytes(path, writing=True) // (_FRAME_HEADER + page_size)  # pages
        return max(0, logged - free_pages) * page_size
    growth = max(0, page_count - on_disk // page_size)
    unlogged = min(cache_pages, page_count) + _REWRITTEN_PAGES
    return growth * page_size + unlogged * (_FRAME_HEADER + page_size) + _WAL_HEADER


class CheckpointRoom:
    """The room a write on the SQLite file at ``path`` keeps for its checkpoint (a
    :data:`~connector_ops.kernel.disk.Reserve`, :func:`checkpoint_growth`). The exact count reads the log's
    frames (≈ 150 µs); first a bound from the ``-wal`` file's length (one ``stat``) and the page cache the
    commit may still write (``cache_bytes``) is tried, and when it fits, that is the answer: on a disk with
    room, a check costs a few µs more than before.

    The page size and the free pages come from the writer's own connection as its transaction begins
    (:meth:`begin`), never from the database file: opening and closing that file in a process that holds
    SQLite connections to it drops their POSIX locks (sqlite.org/howtocorrupt.html §2.2). Reading its header
    that way, a Join's process lost its write lock mid-statement, and another process's connection, alone
    by the locks' account, deleted the log the Join was writing into."""

    def __init__(self, path: str, cache_bytes: int) -> None:
        self.path, self.cache_bytes = path, cache_bytes
        self.page_size = _DEFAULT_PAGE_SIZE
        self.free_pages = 0  # until :meth:`begin`: every logged page counts (an upper bound)

    def begin(self, conn: Any) -> None:
        """As the write's transaction begins on ``conn`` (a SQLAlchemy connection): its page size, and the
        free pages its database has, which the write reuses before the file grows (the log holds nothing of
        another write: :func:`before_write`)."""
        self.page_size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        self.free_pages = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()

    def _log_file(self) -> int:
        try:
            return os.stat(f"{self.path}-wal").st_size
        except OSError:
            return 0

    def during(self, room: int) -> int:
        """As the write runs: its log's pages, which the checkpoint will copy."""
        bound = self._log_file()
        return bound if bound <= room else checkpoint_growth(self.path, self.free_pages, self.page_size)

    def before_commit(self, page_count: Callable[[], int]) -> Callable[[int], int]:
        """Just before the commit, ``page_count()`` being the database's size with the write, in pages."""
        def needed(room: int) -> int:
            bound = self._log_file() + 2 * (self.cache_bytes + _REWRITTEN_PAGES * (_FRAME_HEADER + self.page_size))
            if bound <= room:
                return bound
            return checkpoint_growth(self.path, 0, self.page_size, page_count(), self.cache_bytes // self.page_size)
        return needed


def _run() -> None:
    while True:
        job = _queue.get()
        if isinstance(job, threading.Event):  # :func:`wait`: every job queued before it is done
            job.set()
            continue
        path, checkpointing = job
        try:
            if checkpointing:
                _checkpoint_asked(path)
            if not checkpointing or path not in _opened:  # no engine has the file open (any longer)
                with _connections_lock:
                    _close(path)
        finally:
            if not checkpointing:
                _one_done(_closing, path)


def _checkpoint_asked(path: str) -> None:
    """The checkpoint :func:`after_write` asked for, done: the writes waiting for it go on."""
    with _lock:
        _pending.discard(path)
    try:
        checkpoint(path)
    finally:
        _one_done(_unfinished, path)


def _one_done(counts: dict[str, int], path: str) -> None:
    """One of the file's jobs counted in ``counts`` (checkpoints, closes) is done: its waiters are told. A job
    an interrupt kept from being counted (:func:`after_write`) has no count to end."""
    with _lock:
        left = counts.pop(path, 0) - 1
        if left > 0:
            counts[path] = left
        _finished.notify_all()


def before_write(path: str) -> None:
    """A write transaction on the SQLite file at ``path`` is about to begin: wait until no checkpoint of
    that file is queued or running, so that the log is wholly copied and SQLite can start it over. Nothing
    pending (most writes): no Python call at all while the lock is held (:data:`_lock`)."""
    with _lock:
        if path in _unfinished:
            _finished.wait_for(lambda: path not in _unfinished, timeout=SETTLE_SECONDS)


def checkpoint(path: str, mode: str = "PASSIVE") -> None:
    """One checkpoint of the SQLite file at ``path`` (nothing if it cannot be opened): ``PASSIVE``, or
    ``TRUNCATE`` to also cut the log down to nothing (:func:`give_back`).

    On the connection kept for that file (:func:`_connection`): ``PRAGMA wal_checkpoint`` needs the schema,
    and a new connection reads all of it, one table per virtual file — 63 ms at 5,000 files, 600 ms at
    20,000, each checkpoint, which the next write waited for (:func:`before_write`). A kept connection read
    it once; the checkpoint itself does not read it again when other connections change it.

    ``TRUNCATE`` waits for the file's readers and writer (SQLite's busy handler), up to
    :data:`SETTLE_SECONDS`: in short tries, the lock let go of between them, because a fork waits for that lock
    (:func:`_before_fork`). One wait of 60 s held a fork by the reader's own thread for the whole minute."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        with _connections_lock:
            conn = _connection(path)
            if conn is None:
                return
            try:
                if mode == "PASSIVE":  # waits for nobody
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    return
                conn.execute(f"PRAGMA busy_timeout = {TRY_MS}")
                try:
                    busy = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()[0]  # 1: a reader kept the log
                finally:
                    conn.execute(f"PRAGMA busy_timeout = {BUSY_SECONDS * 1000}")
            except sqlite3.Error:
                _close(path)  # the next checkpoint opens the file anew
                return
        if not busy or time.monotonic() >= deadline:
            return
        time.sleep(0.01)  # a thread waiting for the lock (a fork) gets it


#: the connection each SQLite file is checkpointed on, and the identities of the file and the log it opened
_connections: dict[str, tuple[sqlite3.Connection, tuple[Identity | None, Identity | None]]] = {}
_connections_lock = threading.Lock()


def _connection(path: str) -> sqlite3.Connection | None:
    """The connection kept for ``path`` (under :data:`_connections_lock`), opened anew when the file there,
    or its log, is no longer the one it opened (a backup restored, the file removed: :mod:`.store_file`), so
    that it never checkpoints an old log, into the old file or into the one restored over it; ``None`` if
    there is no file to open (a removed one is not created)."""
    now = with_log(path)
    kept = _connections.get(path)
    if kept is not None and kept[1] == now:
        return kept[0]
    _close(path)
    if now[0] is None:
        return None
    try:
        uri = Path(path).resolve().as_uri() + "?mode=rw"  # a file removed meanwhile is not created again
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
    except sqlite3.Error:
        return None
    try:
        conn.execute("PRAGMA schema_version").fetchall()  # opens the log (reads the header, not the schema)
    except sqlite3.Error:
        conn.close()
        return None
    _connections[path] = conn, with_log(path)  # after the open, as the store's connections record theirs
    return conn


def _close(path: str) -> None:
    """Close the connection kept for ``path``, if any (under :data:`_connections_lock`): without SQLite's
    checkpoint on close if its file or log is no longer the one at the path (:mod:`.log_on_close`)."""
    kept = _connections.pop(path, None)
    if kept is not None:
        if kept[1] != with_log(path):
            keep_log_on_close(kept[0], path)
        with contextlib.suppress(sqlite3.Error):
            kept[0].close()


def opened(path: str) -> None:
    """An engine has opened the SQLite file at ``path``: its checkpoint connection is kept until
    :func:`forget`."""
    with _lock:
        _opened[path] = _opened.get(path, 0) + 1


def forget(path: str) -> None:
    """An engine of the SQLite file at ``path`` is disposed of: the thread closes the file's checkpoint
    connection, after the checkpoints of the file already asked for (one not yet begun would open it again),
    and any it is asked for later closes its own once done if no engine has the file open by then. Returns at
    once: the caller holds the engines' lock, and waiting here for a checkpoint under way held up every
    thread asking for an engine (:mod:`.engines`)."""
    with _lock:
        left = _opened.pop(path, 0) - 1
        if left > 0:  # another engine (the path spelled another way) has the file open: it keeps the connection
            _opened[path] = left
            return
        _ask((path, False))  # queued before it is counted, as in :func:`after_write`
        _closing[path] = _closing.get(path, 0) + 1


def closed(*paths: str) -> bool:
    """Until the thread has closed the connections :func:`forget` asked it to close for the files at ``paths``
    (after the checkpoints of those files asked for before): for a caller that must find the files let go of
    when it returns. Whether it has; if not within :data:`SETTLE_SECONDS`, a warning names the files still open
    (a checkpoint running that long: the thread closes them once it is done).

    All the files are waited for together, by one deadline: :func:`.engines.dispose_all` closes every engine of
    the process, and a wait of its own for each file, in turn, could take 60 s per file."""
    waited = set(paths)
    with _lock:
        if _finished.wait_for(lambda: not waited & _closing.keys(), timeout=SETTLE_SECONDS):
            return True
        left = sorted(waited & _closing.keys())
    _log.warning("%d SQLite file(s) still open after %g s, waiting for their checkpoint connection to close "
                 "(a checkpoint still running?); the checkpoint thread closes them once done: %s",
                 len(left), SETTLE_SECONDS, ", ".join(left))
    return False


@atexit.register
def close_all() -> None:
    """Close every checkpoint connection (at exit: a checkpoint under way finishes first)."""
    with _connections_lock:
        for path in list(_connections):
            _close(path)


def _before_fork() -> None:
    """A fork waits until the thread is out of SQLite (its SQLite work all runs under :data:`_connections_lock`).

    SQLite's own locks (its allocator's, its file system layer's) are process-wide, and a child made by ``fork``
    while the thread held one inherits it held by a thread it does not have: the child's first SQLite call,
    on any file, waits for ever. Forking right after a large write (a multiprocessing pool's workers made while
    its checkpoint ran) did so 7 times in 400 (the child's stack in ``sqlite3Malloc``'s mutex). The fork now
    waits for the checkpoint under way, as a write waits for it (:func:`before_write`): at most one try of a
    ``TRUNCATE`` that waits for readers (:func:`checkpoint`), or the open of a connection. Other threads' SQLite
    work (the user's own, a store's connections in use) is theirs: a fork amid it is not made safe here."""
    _connections_lock.acquire()


def _after_fork_in_parent() -> None:
    _connections_lock.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent)


@in_child
def _after_fork() -> None:
    """A forked child starts with no checkpoint thread, queue or kept connection of its own: the parent's
    connections are left unclosed (:mod:`~connector_ops.kernel.forks`), its thread did not follow the fork,
    and its locks may have been held by that thread at the fork (:data:`_connections_lock` was, by the
    parent's fork itself: :func:`_before_fork`)."""
    global _queue, _lock, _finished, _thread, _connections_lock
    abandon(*(conn for conn, _ in _connections.values()))
    _connections.clear()  # not _opened: the child keeps the engines (:mod:`.engines`), on pools of its own
    _queue, _thread = queue.SimpleQueue(), None
    _pending.clear()
    _unfinished.clear()
    _closing.clear()
    _lock = threading.Lock()
    _finished = threading.Condition(_lock)
    _connections_lock = threading.Lock()


def give_back(path: str) -> None:
    """After a write stopped because the disk ran low (``CONNECTOR_OPS_MIN_FREE_DISK``): the pages it wrote to
    the log, rolled back, go back to the disk now. The log file keeps its largest length otherwise (see
    above), and the space the guard stopped short of taking would stay taken. The background checkpoint the
    stopped write asked for as it ended runs first: a checkpoint that finds another one running gives up."""
    before_write(path)
    checkpoint(path, "TRUNCATE")


def wait() -> None:
    """Until every checkpoint asked for so far is done (benchmarks, tests): the thread reaches a marker queued
    after them."""
    reached = threading.Event()
    with _lock:
        _ask(reached)
    reached.wait()
