"""The SQLite loader process: bulk-loads new virtual files through the ADBC SQLite driver, one request after
another, for as long as its parent keeps it (:mod:`.sqlite_loader` is the parent's side).

ADBC binds whole Arrow columns in C (``adbc_ingest``): faster than the ``sqlite3`` CLI's ``.import``. But
the driver links its own copy of SQLite, and two copies of SQLite in one process corrupt a database they
both open (their POSIX locks cancel each other: sqlite.org/howtocorrupt.html §2.2.1, seen here as
"database disk image is malformed"). So loads run in this separate process, started once and reused
(its start, ≈ 0.2 s, would otherwise be paid by every Push).

Each request creates the row table, its catalog rows and its rows in one ``BEGIN IMMEDIATE`` transaction
(it waits for other writers as ours do) and commits only if everything worked. Protocol, over stdin and
stdout:

* parent: the request as one JSON line; the loader answers ``ready`` (so a parent that finds this
  process gone — it leaves after the idle seconds it was started with — restarts it before sending any
  data); ``{"op": "sync"}`` is answered ``synced`` once the loader is idle;
* parent: the data as frames (a 4-byte big-endian length, then the bytes): CSV data rows, NDJSON, or an
  Arrow IPC stream, per the request's ``format``; a zero length ends the data, ``ABORT`` withdraws it;
* loader: ``committed``, or ``failed <JSON message>`` — possibly before the data has ended (the parent
  then stops sending and withdraws); either way the loader reads on to the end of the data.

The data rows are parsed in a thread a few batches ahead of the inserts (the parsers release the GIL;
the two cores work at once) and at most ``AHEAD`` batches are held, so memory does not grow with the file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import select
import struct
import sys
import threading
from collections.abc import Generator, Iterator
from typing import IO, Any

from connector_ops.resources.virtual_files.file_identity import Identity, identity, log_path, same_file, with_log

MODULE = "connector_ops.resources.virtual_files.sqlite_ingest"
READY = b"ready\n"
COMMITTED = b"committed\n"
SYNCED = b"synced\n"
FAILED = b"failed "
END, ABORT = 0, 0xFFFFFFFF
FRAME = struct.Struct(">I")
#: record batches parsed ahead of the inserts (≈ 1 MiB of input each)
AHEAD = 4


class FileChanged(Exception):
    """The file at the request's path is not the one the parent's engine has open (deleted, replaced or
    moved since: :mod:`.store_file`): the load must not commit into either."""


def check_file(spec: dict[str, Any], log: Identity | None = None) -> Identity | None:
    """Raise :class:`FileChanged` unless the file at ``spec["path"]`` is the one of ``spec["identity"]``
    (``st_dev``, ``st_ino``; a request without it is not checked), and its log the one of ``log`` (the log
    this process's connection opened, as its transaction began: a backup copied over the file shows only
    there, :mod:`.store_file`). As the transaction begins and just before its commit: rows committed into a
    file removed meanwhile, or into a log removed, would be lost with it. Returns the log's identity now."""
    expected = spec.get("identity")
    if expected is not None and not same_file(spec["path"], expected):
        raise FileChanged(f"the SQLite file {spec['path']} was deleted, replaced or moved")
    now = identity(log_path(spec["path"]))
    if log is not None and now != log:
        raise FileChanged(f"the SQLite file {spec['path']} was deleted, replaced or moved")
    return now


class Withdrawn(Exception):
    """The parent withdrew the data (its reading failed): roll back."""


class Inbox:
    """The parent's requests and data on a file descriptor, with a buffer this module can see into (a
    ``BufferedReader`` cannot say whether it holds bytes without blocking)."""

    def __init__(self, fd: int) -> None:
        self._raw = io.FileIO(fd, "rb", closefd=False)
        self._buffer = bytearray()

    def wait(self, seconds: float) -> bool:
        """Whether something arrived within ``seconds``."""
        if self._buffer:
            return True
        poller = select.poll()
        poller.register(self._raw, select.POLLIN)
        return bool(poller.poll(int(seconds * 1000)))

    def readline(self) -> bytes:
        """The next line (``b""`` once the parent has closed the stream)."""
        while (end := self._buffer.find(b"\n")) < 0:
            chunk = self._raw.read(1 << 16)
            if not chunk:
                return b""
            self._buffer += chunk
        line = bytes(self._buffer[:end + 1])
        del self._buffer[:end + 1]
        return line

    def readinto(self, view: memoryview) -> int:
        """Up to ``len(view)`` bytes (0: the parent closed the stream)."""
        if self._buffer:
            n = min(len(view), len(self._buffer))
            view[:n] = self._buffer[:n]
            del self._buffer[:n]
            return n
        return self._raw.readinto(view) or 0

    def exactly(self, n: int) -> bytes:
        out = bytearray(n)
        view, got = memoryview(out), 0
        while got < n:
            read = self.readinto(view[got:])
            if not read:
                raise EOFError("the parent closed the data stream")
            got += read
        return bytes(out)


class Frames(io.RawIOBase):
    """One request's data: the frames in ``inbox`` up to the end (or the withdrawal).

    Arrow's readers read ahead from threads of their own, which may still be reading when a failed load
    drains the rest of its data (:meth:`drain`); two readers of one pipe would tear its frames apart and
    both wait for bytes that never come (a failed NDJSON load followed by the next load hung so). So every
    read holds a lock, and once the drain has begun every other read gets the end."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._left = 0  # bytes left in the current frame
        self.done = False  # the end (or the withdrawal) was read
        self._lock = threading.Lock()
        self._drained = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        with self._lock:
            return 0 if self._drained else self._next(buffer)

    def _next(self, buffer: Any) -> int:
        while not self._left:
            if self.done:
                return 0
            (length,) = FRAME.unpack(self._inbox.exactly(FRAME.size))
            if length == ABORT:
                self.done = True
                raise Withdrawn("the parent withdrew the data")
            if length == END:
                self.done = True
                return 0
            self._left = length
        view = memoryview(buffer).cast("B")
        n = self._inbox.readinto(view[:min(len(view), self._left)])
        if not n:
            raise EOFError("the parent closed the data stream mid-frame")
        self._left -= n
        return n

    def drain(self) -> None:
        """Read (and drop) what remains of the data, up to the next request; from now on, readers get the end."""
        buffer = bytearray(1 << 20)
        with self._lock, contextlib.suppress(Withdrawn):
            self._drained = True
            while self._next(buffer):
                pass


def batches_of(spec: dict[str, Any], source: IO[bytes]) -> Generator[Any, None, None]:
    """The record batches of the request's data; a byte left over after the last one is an error."""
    if spec["format"] == "csv":
        from connector_ops.resources.virtual_files.csv_columns import csv_batches

        yield from csv_batches(source, len(spec["columns"]), spec["delimiter"])
    elif spec["format"] == "ndjson":
        from connector_ops.resources.virtual_files.ndjson_columns import ndjson_batches

        yield from ndjson_batches(source, spec["columns"], spec["block"], threads=True)
    else:
        import pyarrow as pa

        yield from pa.ipc.open_stream(source)
    if source.read(1):
        raise ValueError("bytes after the end of the data")


class ReadAhead:
    """Pulls record batches from ``batches`` in a thread, at most ``AHEAD`` ahead of the consumer, as
    ``reader`` (columns renamed ``c0…`` like the row table's). What ``batches`` raises is kept in ``error``
    and ends the batches (the load then fails on it)."""

    def __init__(self, batches: Generator[Any, None, None], width: int) -> None:
        import pyarrow as pa

        self.error: BaseException | None = None
        self._schema = pa.schema([(f"c{i}", pa.string()) for i in range(width)])
        self._queue: queue.Queue[Any] = queue.Queue(AHEAD)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(batches,), daemon=True)
        self._thread.start()
        self.reader = pa.RecordBatchReader.from_batches(self._schema, self._batches())

    def _run(self, batches: Generator[Any, None, None]) -> None:
        import pyarrow as pa

        try:
            with contextlib.closing(batches):  # stopped early too, Arrow's reading thread is out of the data
                for batch in batches:
                    if not self._put(pa.RecordBatch.from_arrays(batch.columns, schema=self._schema)):
                        return
        except BaseException as exc:  # handed to the consumer: the load fails on it
            self.error = exc
        self._put(None)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=0.1)
                return True
        return False

    def _batches(self) -> Iterator[Any]:
        while (batch := self._queue.get()) is not None:
            yield batch
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Stop the thread (the consumer may have stopped early) and wait for it."""
        self._stop.set()
        self._thread.join()


class Database:
    """A new ADBC connection to the SQLite file at ``path``, with the store's settings, except that it
    never checkpoints by itself (:func:`serve` does, after answering)."""

    def __init__(self, path: str) -> None:
        import adbc_driver_manager as adbc
        import adbc_driver_sqlite

        self.path = path
        #: the identities of the file and the log this connection opened (:func:`ingest`)
        self.files: tuple[Identity | None, Identity | None] = (None, None)
        self._adbc = adbc
        from connector_ops.resources.virtual_files.sqlite_names import sqlite_name

        self._database = adbc_driver_sqlite.connect(sqlite_name(path))
        self.conn = adbc.AdbcConnection(self._database)
        for pragma in ("busy_timeout=60000", "synchronous=NORMAL", "foreign_keys=ON", "wal_autocheckpoint=0"):
            self.execute(f"PRAGMA {pragma}")

    def execute(self, sql: str) -> None:
        with contextlib.closing(self._adbc.AdbcStatement(self.conn)) as statement:
            statement.set_sql_query(sql)
            statement.execute_update()

    def scalar(self, sql: str) -> Any:
        """The one value ``sql`` answers."""
        import pyarrow as pa

        with contextlib.closing(self._adbc.AdbcStatement(self.conn)) as statement:
            statement.set_sql_query(sql)
            stream, _ = statement.execute_query()
            return pa.RecordBatchReader._import_from_c(stream.address).read_all().column(0)[0].as_py()

    def ingest(self, table_name: str, reader: Any) -> None:
        """Append the record batches of ``reader`` to ``table_name`` (column names alike)."""
        with contextlib.closing(self._adbc.AdbcStatement(self.conn)) as statement:
            statement.set_options(**{"adbc.ingest.target_table": table_name,
                                     "adbc.ingest.mode": "adbc.ingest.mode.append"})
            statement.bind_stream(reader)
            statement.execute_update()

    def holds_files(self) -> bool:
        """Whether the file at the path and its log are still the ones this connection opened."""
        return self.files == (None, None) or self.files == with_log(self.path)

    def close(self) -> None:
        self.conn.close()
        self._database.close()


#: connections left unclosed: on a file replaced under them, SQLite's checkpoint on close would copy their
#: old log into the file now at the path (this process leaves by ``os._exit``, closing nothing)
_abandoned: list[Database] = []


def ingest(db: Database, spec: dict[str, Any], source: IO[bytes]) -> None:
    """One load: the table, its catalog rows and the rows of ``source``, in one transaction, committed
    only if everything worked."""
    ahead = ReadAhead(batches_of(spec, source), len(spec["columns"]))
    try:
        db.execute("BEGIN IMMEDIATE")  # which opens the file's log
        try:
            log = check_file(spec)
            db.files = identity(spec["path"]), log
            db.execute(spec["ddl"])
            db.ingest(spec["table_name"], ahead.reader)
            if ahead.error is not None:  # the driver's message about a failed stream says less
                raise ahead.error
            for sql in spec["inserts"]:  # the catalog's rows last: the file is dated when its load ends (gc)
                db.execute(sql)
            room_for_checkpoint(db, spec)
            check_file(spec, log)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    except BaseException:
        if ahead.error is not None:
            raise ahead.error from None
        raise
    finally:
        ahead.close()


def room_for_checkpoint(db: Database, spec: dict[str, Any]) -> None:
    """Before the commit: refuse (:class:`~connector_ops.kernel.disk.DiskBelowFloor`) a load whose checkpoint
    would take the free space below the request's ``min_free``. The parent checks the floor, and the log's
    growth, as it sends the data; only here is the database's final size known (``PRAGMA page_count``)."""
    if not spec.get("min_free"):
        return
    from connector_ops.kernel.disk import DiskFloor
    from connector_ops.resources.virtual_files.checkpoints import checkpoint_growth

    path = spec["path"]  # its size from this connection: opening the file here would drop the write lock
    page_size, page_count = int(db.scalar("PRAGMA page_size")), int(db.scalar("PRAGMA page_count"))
    cache = int(db.scalar("PRAGMA cache_size"))  # pages, or KiB when negative
    cache_pages = cache if cache > 0 else -cache * 1024 // page_size
    need = checkpoint_growth(path, 0, page_size, page_count, cache_pages)
    DiskFloor(os.path.dirname(os.path.abspath(path)), spec["min_free"]).check(lambda _room: need)


class Checkpointer:
    """Copies each load's pages from the write-ahead log into the database file (``wal_checkpoint``,
    ≈ 0.4 s per 100 MB, mostly ``fsync``) in a thread, after the load's answer: the parent goes on, and
    so does the next load (a passive checkpoint and a writer do not wait for each other). The rows are
    committed and visible before that, as after any commit of the store's own connections (whose
    checkpoints SQLite also runs after the commit)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Database] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def after(self, db: Database) -> None:
        """Checkpoint ``db``'s database, then close ``db``."""
        self._queue.put(db)

    def _run(self) -> None:
        while True:
            db = self._queue.get()
            try:
                if not db.holds_files():  # its log would be copied into a file restored over its own
                    _abandoned.append(db)
                    continue
                with contextlib.suppress(Exception):  # one that cannot finish now happens later
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                with contextlib.suppress(Exception):
                    db.close()
            finally:
                self._queue.task_done()

    def wait(self) -> None:
        """Until every checkpoint asked for is done."""
        self._queue.join()


def serve(inbox: Inbox, replies: IO[bytes], idle: float) -> None:
    """Answer requests until the parent closes the stream (or sends none for ``idle`` seconds); each
    load's checkpoint follows in the :class:`Checkpointer` (``sync`` is answered once they are done)."""
    checkpointer = Checkpointer()
    while inbox.wait(idle) and (line := inbox.readline()):
        spec = json.loads(line)
        if spec.get("op") == "sync":
            checkpointer.wait()
            _reply(replies, SYNCED)
            continue
        _reply(replies, READY)
        data = Frames(inbox)
        db: Database | None = None
        try:
            db = Database(spec["path"])
            ingest(db, spec, io.BufferedReader(data, 1 << 20))
        except BaseException as exc:
            _reply(replies, FAILED + json.dumps(f"{type(exc).__name__}: {exc}").encode() + b"\n")
            data.drain()
            if isinstance(exc, FileChanged):  # left open (see _abandoned), and this process ends: a new
                if db is not None:  # connection here would share the old one's -shm index of the file
                    _abandoned.append(db)
                break
            if db is not None:
                with contextlib.suppress(Exception):
                    db.close()
        else:
            _reply(replies, COMMITTED)
            checkpointer.after(db)
    checkpointer.wait()


def _reply(replies: IO[bytes], message: bytes) -> None:
    replies.write(message)
    replies.flush()


def main() -> None:
    """Serve, then leave at once: Arrow's threads can abort the interpreter's teardown ("terminate called
    without an active exception"), which must not look like a failure."""
    try:
        import adbc_driver_manager  # noqa: F401  (while the parent prepares its first request)
        import adbc_driver_sqlite  # noqa: F401
        import pyarrow  # noqa: F401

        serve(Inbox(sys.stdin.fileno()), sys.stdout.buffer, float(sys.argv[1]))
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
