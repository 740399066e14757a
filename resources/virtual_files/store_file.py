"""The SQLite file a process's engine has open, checked against the file now at its path.

A long-lived process (a code server, the daemon, a notebook kernel) keeps its engine for weeks, and the
engine's pooled connections keep the database file open. An operator who restores a backup over it, moves
the home, removes the file to start over or swaps a volume left those connections on the old file: every
later write of that process "succeeded" into a file no other process sees, lost when the process ended.
SQLite cannot tell: the old inode is still a whole database to it. So the file is recognised by its
identity (``st_dev``, ``st_ino``), as the file at the path now against the one the connections opened —
and so is its ``-wal`` log: a backup copied over the live file (``cp``, written into the same inode) keeps
the file's identity, and the log removed with it (or made anew by another process since) is what shows it.
The connections still had the old log and its ``-shm`` index open: their reads came from the old log, their
commits went into it, seen by no other process, and the last of them to close copied that log back into the
restored file (the restore undone, other processes' commits since overwritten). While a connection is open
SQLite never deletes its log, so a log at the path other than the one it opened (or none) is a replacement:

* each pooled connection records the identity of the file at its path when it connects, and of its log
  (once it has one: a new database has none until its first write), and the engine those of the first
  (:func:`watch`): the file :func:`.engines.get_engine` created or found its catalog in;
* :func:`.engines.get_engine` compares the engine's file with the one at the path (:meth:`StoreFile.moved`,
  a ``stat`` of the file and one of its log) and, if they differ, builds the engine anew — on a file that
  is new there, creating the catalog as a fresh process would. A call that begins after the swap runs on
  the file now at the path;
* every transaction compares again as it begins, before anything is read or written, and a write once more
  just before its ``COMMIT``: a transaction on an engine taken before the swap (or racing it) fails with
  :class:`StoreFileChanged` (503, retryable), its connection discarded and the engine forgotten, so the next
  call reopens the path. A write so stopped is rolled back: it never reports rows stored in the old file.

A connection found on a replaced file is closed without SQLite's checkpoint on close
(:mod:`.log_on_close`), and so is any connection whose files are no longer at the path as it closes: its
log is never copied into the file now at the path, nor the log there deleted by name.

Not retried inside the call: a write stopped before its commit has done its work on the old file, and only
its caller knows whether to do it again on the new one (whose contents may differ: a backup restored).

One ``stat`` costs ≈ 1–2 µs; a write transaction pays six (file and log, at engine, begin, commit). The
check before the commit leaves the instant between that ``stat`` and SQLite's commit unguarded: a file removed in that
microsecond still loses that one write, as nothing short of a lock every tool that replaces files would
have to honour can prevent. The SQLite loader process (:mod:`.sqlite_ingest`) is given the identity with
each load and checks it the same way, as its transaction begins and before it commits, with the log its
own connection opened. Not caught: a copy over the live file that leaves the log in place (SQLite then
reads the old log's pages over the restored file's in every process; nothing at the path changes), and
connections this process opens on the restored file while one of its old ones is still in a transaction
(SQLite shares one ``-shm`` index per file among a process's connections). Hence the restore procedures
of docs/deployment.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from connector_ops.kernel.errors import ConnectorOpsError
from connector_ops.resources.virtual_files.file_identity import Identity, identity, log_path
from connector_ops.resources.virtual_files.log_on_close import keep_log_on_close

#: ``ConnectionRecord.info`` keys: the identity of the file a pooled connection opened, and of its log
_OPENED = "connector_ops.store_file"
_LOG = "connector_ops.store_file.log"


class StoreFileChanged(ConnectorOpsError):
    """The SQLite file the store had open is no longer the file at its path (deleted, replaced, moved): 503,
    retryable — the next call opens the file now at the path."""

    status = 503
    retryable = True


def changed_error(path: str, *, before_commit: bool) -> StoreFileChanged:
    """The error naming ``path``: what happened to the file, what became of this call, what the next does."""
    what = ("this write was rolled back before its commit: nothing of it is stored" if before_commit
            else "nothing was read from or written to it by this call")
    return StoreFileChanged(
        f"the virtual-file store's SQLite file {path} was deleted, replaced or moved while this process had it "
        f"open (a backup restored, the home moved or removed?); {what}. The next call opens the file now at "
        "that path (a new store if there is none): try again")


class StoreFile:
    """The SQLite file at ``path`` as an engine opened it: ``opened`` is the identity of the file its first
    connection found (``None`` until one connects), ``log_opened`` that of the log its connections have
    open (``None`` until one has one)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.log = log_path(path)
        self.opened: Identity | None = None
        self.log_opened: Identity | None = None

    def moved(self) -> bool:
        """Whether the file at the path, or its log, is no longer the one this engine opened (or is gone).
        A log that is missing is not counted here: SQLite deletes it when the last connection to the file,
        in every process, closes (a disposed pool, say), and the engine (with what was registered on it) is
        still the right one; a connection that had that log open finds it gone as its transaction begins
        (:meth:`holds`), which is where a copy over the live file with its log removed is caught."""
        if self.opened is None:
            return False
        if identity(self.path) != self.opened:
            return True
        log = identity(self.log)
        return self.log_opened is not None and log is not None and log != self.log_opened

    def holds(self, info: dict[str, Any]) -> bool:
        """Whether the connection whose record's ``info`` this is has the file and the log now at the path
        open (and the file is this engine's). A connection that had no log as it connected takes the one
        there now: a new database gets its log at its first write."""
        now = identity(self.path)
        if now is None or not now == self.opened == info.get(_OPENED):
            return False
        log = identity(self.log)
        if info.get(_LOG) is None:
            info[_LOG] = log
            self.log_opened = log if log is not None else self.log_opened
            return True
        return log == info[_LOG]

    def check(self, conn: sa.Connection, *, before_commit: bool = False) -> None:
        """Raise :class:`StoreFileChanged` (``conn``'s connection invalidated: SQLite rolls back what it had
        not committed as it closes, without its checkpoint) unless ``conn`` and the path are on the file and
        the log this engine opened."""
        if self.holds(conn.connection.info):
            return
        conn.invalidate()
        raise changed_error(self.path, before_commit=before_commit)

    def connected(self, info: dict[str, Any]) -> None:
        """A connection has opened the file (its ``PRAGMA``s run, which open the log of a database in WAL
        mode): record its files in its record's ``info``, and the engine's from the first."""
        info[_OPENED], info[_LOG] = identity(self.path), identity(self.log)
        if self.opened is None:
            self.opened = info[_OPENED]
        if info[_LOG] is not None:
            self.log_opened = info[_LOG]

    def closing(self, dbapi_conn: Any, info: dict[str, Any]) -> None:
        """A connection is about to close: one whose files are no longer at the path closes without its
        checkpoint (:mod:`.log_on_close`)."""
        if not self.holds(info):
            keep_log_on_close(dbapi_conn, self.path)


def watch(engine: sa.Engine, path: str, forget: Callable[[], None], is_writing: Callable[[sa.Connection], bool],
          ) -> StoreFile:
    """Check ``engine``'s transactions against the SQLite file at ``path`` (see the module); ``forget()``
    drops the engine from the process's engines once its file has changed. Registered before the engine's
    other ``begin`` listeners, so a transaction on the old file stops before ``BEGIN IMMEDIATE`` waits for
    its lock."""
    file = StoreFile(path)

    @sa.event.listens_for(engine, "connect")
    def on_connect(_dbapi_conn: Any, record: Any) -> None:  # after sqlite3 opened the file (see engines)
        file.connected(record.info)

    @sa.event.listens_for(engine, "close")
    def on_close(dbapi_conn: Any, record: Any) -> None:  # before the pool closes it
        file.closing(dbapi_conn, record.info)

    def check(conn: sa.Connection, before_commit: bool) -> None:
        try:
            file.check(conn, before_commit=before_commit)
        except StoreFileChanged:
            forget()
            raise

    @sa.event.listens_for(engine, "begin")
    def on_begin(conn: sa.Connection) -> None:
        check(conn, False)

    @sa.event.listens_for(engine, "commit")
    def on_commit(conn: sa.Connection) -> None:
        if is_writing(conn):
            check(conn, True)

    return file
