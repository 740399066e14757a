"""The SQLite file a process's engine has open, checked against the file now at its path.

A long-lived process (a code server, the daemon, a notebook kernel) keeps its engine for weeks, and the
engine's pooled connections keep the database file open. An operator who restores a backup over it, moves
the home, removes the file to start over or swaps a volume left those connections on the old file: every
later write of that process "succeeded" into a file no other process sees, lost when the process ended.
SQLite cannot tell: the old inode is still a whole database to it. So the file is recognised by its
identity (``st_dev``, ``st_ino``), as the file at the path now against the one the connections opened:

* each pooled connection records the identity of the file at its path when it connects, and the engine
  that of the first (:func:`watch`): the file :func:`.engines.get_engine` created or found its catalog in;
* :func:`.engines.get_engine` compares the engine's file with the one at the path (:meth:`StoreFile.moved`,
  one ``stat``) and, if they differ, builds the engine anew — on a file that is new there, creating the
  catalog as a fresh process would. A call that begins after the swap runs on the file now at the path;
* every transaction compares again as it begins, before anything is read or written, and a write once more
  just before its ``COMMIT``: a transaction on an engine taken before the swap (or racing it) fails with
  :class:`StoreFileChanged` (503, retryable), its connection discarded and the engine forgotten, so the next
  call reopens the path. A write so stopped is rolled back: it never reports rows stored in the old file.

Not retried inside the call: a write stopped before its commit has done its work on the old file, and only
its caller knows whether to do it again on the new one (whose contents may differ: a backup restored).

One ``stat`` costs ≈ 1–2 µs; a write transaction pays three (engine, begin, commit). The check before the
commit leaves the instant between that ``stat`` and SQLite's commit unguarded: a file removed in that
microsecond still loses that one write, as nothing short of a lock every tool that replaces files would
have to honour can prevent. The SQLite loader process (:mod:`.sqlite_ingest`) is given the identity with
each load and checks it the same way, as its transaction begins and before it commits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from connector_ops.kernel.errors import ConnectorOpsError
from connector_ops.resources.virtual_files.file_identity import Identity, identity

#: ``ConnectionRecord.info`` key: the identity of the file a pooled connection opened
_OPENED = "connector_ops.store_file"


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
    connection found (``None`` until one connects)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.opened: Identity | None = None

    def moved(self) -> bool:
        """Whether the file at the path is no longer the one this engine opened (or is gone)."""
        return self.opened is not None and identity(self.path) != self.opened

    def check(self, conn: sa.Connection, *, before_commit: bool = False) -> None:
        """Raise :class:`StoreFileChanged` (``conn``'s connection invalidated: SQLite rolls back what it had
        not committed as it closes) unless ``conn`` and the path are on the file this engine opened."""
        now = identity(self.path)
        if now is not None and now == self.opened == conn.connection.info.get(_OPENED):
            return
        conn.invalidate()
        raise changed_error(self.path, before_commit=before_commit)


def watch(engine: sa.Engine, path: str, forget: Callable[[], None], is_writing: Callable[[sa.Connection], bool],
          ) -> StoreFile:
    """Check ``engine``'s transactions against the SQLite file at ``path`` (see the module); ``forget()``
    drops the engine from the process's engines once its file has changed. Registered before the engine's
    other ``begin`` listeners, so a transaction on the old file stops before ``BEGIN IMMEDIATE`` waits for
    its lock."""
    file = StoreFile(path)

    @sa.event.listens_for(engine, "connect")
    def on_connect(_dbapi_conn: Any, record: Any) -> None:  # after sqlite3 opened the file
        opened = identity(path)
        record.info[_OPENED] = opened
        if file.opened is None:
            file.opened = opened

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
