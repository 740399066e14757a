"""What every part of the store shares: the engine, read and write transactions, and the catalog lookup.

Every public store method is one transaction: a failed push, append or replace leaves the database
exactly as it was (DDL is transactional in both SQLite and PostgreSQL). The connections stay inside
the store: actions call whole operations and never see one.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import sqlalchemy as sa

from connector_ops.kernel.disk import DEFAULT_MIN_FREE_DISK, DiskBelowFloor, DiskFloor
from connector_ops.kernel.errors import InvalidInput, NotFound
from connector_ops.kernel.fence import check_fence
from connector_ops.kernel.limits import NUL_REFUSED, check_column_names, holds_surrogate, surrogate_refused
from connector_ops.kernel.resource import Resource
from connector_ops.resources.virtual_files import catalog as cat
from connector_ops.resources.virtual_files.array_cursors import sqlite_path
from connector_ops.resources.virtual_files.catalog import VirtualFileInfo
from connector_ops.resources.virtual_files.checkpoints import CheckpointRoom, give_back
from connector_ops.resources.virtual_files.compaction import Compaction, compact_sqlite
from connector_ops.resources.virtual_files.disk_full import full_error, is_full
from connector_ops.resources.virtual_files.driver_connection import driver_of
from connector_ops.resources.virtual_files.engines import SQLITE_CACHE_KIB, WRITE, get_engine, is_writing, sized_kib
from connector_ops.resources.virtual_files.interrupts import keeping
from connector_ops.resources.virtual_files.urls import DatabaseUrl

#: ``Connection.info`` key: the virtual files the open write transaction wrote rows of (:func:`mark_written`)
_WRITTEN = "connector_ops.written_virtual_files"


def _nothing_logged(_room: int) -> int:
    """The checkpoint's share of a write not begun: its log holds nothing yet (what an earlier write left
    there, however long the ``-wal`` file, is in the database already: :func:`.before_write`)."""
    return 0


def mark_written(conn: sa.Connection, vf_id: str) -> None:
    """Date ``vf_id`` (its ``created_at``) when the ``writing()`` transaction ``conn`` ends.

    A virtual file is dated by its last write, not its first: ``connector-ops gc --older-than`` keeps what
    was written after its cutoff, and a file whose rows were all rewritten (Map over itself), appended to or
    deleted from today is as fresh as a new one; a Push or Join longer than the cutoff must not be old the
    moment it commits. One ``UPDATE`` of the catalog per write transaction."""
    conn.info[_WRITTEN].add(vf_id)


def _date_written(conn: sa.Connection, written: set[str]) -> None:
    if written:
        vf = cat.virtual_file
        conn.execute(sa.update(vf).where(vf.c.id.in_(sorted(written))).values(created_at=cat.write_ended(conn)))


@functools.cache
def _lookup() -> sa.Select:
    """The catalog entry's one query, built once: every action starts with it, and building and keying it
    anew each time took more than running it (SQLite ≈ 200 µs of a 700 µs Query)."""
    vf, col = cat.virtual_file, cat.vf_column
    return (
        sa.select(vf.c.table_name, vf.c.generation, col.c.ordinal, col.c.name, col.c.indexed)
        .select_from(vf.outerjoin(col, col.c.vf_id == vf.c.id))
        .where(vf.c.id == sa.bindparam("vf_id"))
        .order_by(col.c.ordinal)
    )


@functools.cache
def _lock(writer: bool, reader: bool) -> sa.Select:
    """PostgreSQL: the catalog row of the file locked, for a writer (``FOR UPDATE``) or a reader (``FOR
    SHARE``), in a statement of its own: one that waited for a writer's lock sees only the locked row as the
    writer left it, and its joined rows (the columns) from before (READ COMMITTED rechecks just the locked
    row). So an action that waited for a Map in place read the new table under the old column names: a
    header over other columns, appended values under a renamed column, ``column … does not exist``. The
    lookup that follows is a new statement, whose snapshot holds what the writer committed.

    A read transaction's ``FOR SHARE`` gives it a transaction id, and so a commit record that waits for the
    write-ahead log's flush. A reader's commit has nothing to keep, so its lock also turns
    ``synchronous_commit`` off for that transaction alone (``set_config(…, true)``, in the same statement).
    300 transactions of lookup + 20-row SELECT + commit: 1,211 µs each with the flush, 793 µs without,
    794 µs with no lock at all (a script)."""
    vf = cat.virtual_file
    relaxed = [sa.func.set_config("synchronous_commit", "off", sa.true())] if reader else []
    return sa.select(vf.c.generation, *relaxed).where(vf.c.id == sa.bindparam("vf_id")).with_for_update(
        read=not writer)


class StoreCore(Resource):
    """Virtual files in the database at ``database_url`` (``sqlite:///…`` or ``postgresql+psycopg://…``)."""

    database_url: DatabaseUrl
    min_free_disk: int = DEFAULT_MIN_FREE_DISK
    """Bytes of free space SQLite's writes leave on the disk of its file (``CONNECTOR_OPS_MIN_FREE_DISK``)."""

    @property
    def engine(self) -> sa.Engine:
        """The process's engine of ``database_url``, its faults named with this store's ``min_free_disk``."""
        return get_engine(self.database_url, self.min_free_disk)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextlib.contextmanager
    def reading(self) -> Iterator[sa.Connection]:
        with self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def writing(self, *, grows: bool = True) -> Iterator[sa.Connection]:
        """A write transaction; a value the database cannot hold is the caller's invalid input (400).

        On a SQLite file one that ``grows`` the database keeps ``min_free_disk`` free on its disk: refused
        before it begins, stopped by its statements' progress handler once the free space falls below
        (:mod:`.interrupts`), then rolled back. A drop or a delete frees space, so it is never refused: it is
        how one gets out of a full disk."""
        floor, room = self._floor_and_room() if grows else (None, None)
        if floor is not None:
            floor.check(_nothing_logged)  # the log holds nothing of this write yet
        try:
            with self.engine.execution_options(**WRITE).begin() as conn, keeping(conn, floor):
                info = conn.info  # kept: after an interrupt ``conn.info`` raises (an invalidated connection)
                info[_WRITTEN] = set()
                if room is not None:
                    room.begin(conn)
                try:
                    yield conn
                    _date_written(conn, info[_WRITTEN])
                    if floor is not None and room is not None:  # rolled back unless its checkpoint fits
                        floor.check(room.before_commit(
                            lambda: conn.exec_driver_sql("PRAGMA page_count").scalar_one()))
                    check_fence("the virtual-file store's write")  # inside: a refusal rolls it back
                finally:
                    info.pop(_WRITTEN, None)  # the pooled connection's info outlives the transaction
        except DiskBelowFloor:
            self.give_back_log()
            raise
        except Exception as exc:
            path = sqlite_path(self.database_url)
            if path and is_full(exc, path):  # the floor off, or outrun by another process
                self.give_back_log()
                raise full_error(path, self.min_free_disk) from None
            problem = unstorable_value(exc)
            if problem is None:
                raise
            raise problem from None

    def give_back_log(self) -> None:
        """The disk space a write stopped below the floor took in SQLite's log, given back (:func:`.give_back`)."""
        path = sqlite_path(self.database_url)
        if path:
            give_back(path)

    def disk_floor(self) -> DiskFloor | None:
        """The floor of free space on the disk of the SQLite file (``None``: PostgreSQL, or in memory).

        It keeps room for the checkpoint too: once a write commits, its log's pages are copied into the
        database file, which grows by as much again as the log took. Counting the log alone, a Push the
        floor let through filled the disk at its checkpoint, and nothing could be written after it."""
        return self._floor_and_room()[0]

    def _floor_and_room(self) -> tuple[DiskFloor | None, CheckpointRoom | None]:
        path = sqlite_path(self.database_url)
        if not path:
            return None, None
        folder = os.path.dirname(os.path.abspath(path))
        if self.min_free_disk <= 0:
            return DiskFloor(folder, 0), None
        room = CheckpointRoom(path, sized_kib(SQLITE_CACHE_KIB) << 10)
        return DiskFloor(folder, self.min_free_disk, reserve=room.during), room

    @contextlib.contextmanager
    def reading_beside(self, conn: sa.Connection) -> Iterator[sa.Connection]:
        """A connection that reads what the open transaction of ``conn`` reads, so that ``conn`` can keep one
        ``COPY`` streaming while the rows it is fed are fetched.

        PostgreSQL: a second connection whose read-only transaction imports the snapshot ``conn`` exports.
        One connection cannot fetch a page while a ``COPY`` is open, so a Map alternated: the server stored a
        page while the client waited, then the client built the next one while the server idled (1M rows:
        2.1 s of 6.4 s waiting for ``COPY`` to finish). The importer does not see what ``conn`` wrote, only
        the committed rows ``conn``'s catalog lock keeps still. Close it before ``conn`` drops or replaces a
        table it read. SQLite: ``conn`` itself (its reads and writes interleave on one connection).
        """
        if conn.dialect.name != "postgresql":
            yield conn
            return
        from psycopg import sql

        snapshot = conn.exec_driver_sql("SELECT pg_export_snapshot()").scalar_one()
        options = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}
        with self.engine.connect().execution_options(**options) as reader, reader.begin():
            driver = driver_of(reader.connection)
            driver.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            yield reader

    def compact(self, *, dry_run: bool = False) -> Compaction | None:
        """Give back the disk space dropped files left in a SQLite database (:mod:`.compaction`); ``None``
        on PostgreSQL, which gives it back as it drops, or when there is too little to give back."""
        path = sqlite_path(self.database_url)
        return None if path is None else compact_sqlite(self.engine, path, dry_run=dry_run,
                                                        min_free=self.min_free_disk)

    def inventory(self) -> list[tuple[str, datetime]]:
        """Every virtual file's id and the time its last write ended (UTC, ``created_at``: :func:`mark_written`),
        oldest first: what garbage collection weighs."""
        vf = cat.virtual_file
        with self.reading() as conn:
            rows = conn.execute(sa.select(vf.c.id, vf.c.created_at).order_by(vf.c.created_at, vf.c.id)).all()
        return [(vf_id, as_utc(created)) for vf_id, created in rows]

    def copies(self) -> dict[str, str]:
        """The files ``store copy`` made here that are still here, by the id each copies (``copied_from``:
        :data:`.catalog.vf_origin`); of two copies of one file, the later."""
        vf, origin = cat.virtual_file, cat.vf_origin
        with self.reading() as conn:
            rows = conn.execute(sa.select(origin.c.copied_from, origin.c.vf_id)
                                .join(vf, vf.c.id == origin.c.vf_id).order_by(vf.c.created_at, vf.c.id)).all()
        return dict(rows)

    def info(self, conn: sa.Connection, vf_id: str, *, lock: bool = False) -> VirtualFileInfo:
        """The catalog entry of ``vf_id`` (``NotFound`` if there is none).

        On PostgreSQL the entry stays locked until the transaction ends: ``lock`` for a writer (``FOR UPDATE``),
        else for a reader (``FOR SHARE``), so a file replaced or dropped meanwhile (a Map in place, an asset
        re-materialised by another run) waits for the reader instead of pulling its table from under it.
        SQLite readers keep their snapshot anyway.
        """
        if not isinstance(vf_id, str) or not vf_id:
            raise NotFound(f"virtual file {vf_id!r} not found")
        dialect = conn.dialect.name
        key = {"vf_id": vf_id}
        if dialect == "postgresql":
            # a transaction begun without WRITE writes nothing, so its commit need not wait for a flush
            reader = not lock and not is_writing(conn)
            if conn.execute(_lock(lock, reader), key).first() is None:
                raise NotFound(f"virtual file {vf_id!r} not found")
        rows = conn.execute(_lookup(), key).all()  # the file and its columns
        if not rows:
            raise NotFound(f"virtual file {vf_id!r} not found")
        head = rows[0]
        cols = [r for r in rows if r.ordinal is not None]
        return VirtualFileInfo(
            id=vf_id,
            table_name=head.table_name,
            generation=head.generation,
            names=tuple(c.name for c in cols),
            ordinals=tuple(c.ordinal for c in cols),
            indexed=frozenset(c.ordinal for c in cols if c.indexed),
        )

    @staticmethod
    def new_table(conn: sa.Connection, vf_id: str, names: Sequence[str], *, build: bool = True) -> VirtualFileInfo:
        """A new row table with ``names`` as its columns, for ``vf_id``; not ``build``: only named, for a
        :class:`~.writing.RowWriter` that creates it with the columns its first rows add."""
        check_column_names(names, "schema")
        table_name = f"vf_{uuid.uuid4().hex}"
        info = VirtualFileInfo(vf_id, table_name, 1, tuple(names), tuple(range(len(names))), frozenset())
        if build:
            info.table.create(conn)
        return info

    @staticmethod
    def catalogue_columns(conn: sa.Connection, info: VirtualFileInfo) -> None:
        if info.names:
            conn.execute(sa.insert(cat.vf_column), [
                {"vf_id": info.id, "ordinal": o, "name": n, "indexed": False}
                for n, o in zip(info.names, info.ordinals, strict=True)
            ])


def as_utc(moment: datetime) -> datetime:
    """SQLite hands back ``CURRENT_TIMESTAMP`` without a zone; it is UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class UnstorableValue(InvalidInput):
    """A value the database cannot take (:func:`unstorable_value`), found as it was written."""

    def __init__(self, problem: str) -> None:
        super().__init__("", problem)


def unstorable_value(exc: BaseException) -> UnstorableValue | None:
    """A value no database can take, worded for the user: half a UTF-16 surrogate pair (a Map function or a
    Python caller made one; UTF-8 cannot encode it), or PostgreSQL's refusal of a NUL (no PostgreSQL text holds
    one) or of a character the database's encoding has no place for (a LATIN1 database and an emoji). The
    driver's error may come bare (``COPY``) or wrapped by SQLAlchemy; its first line is kept, not the statement."""
    half = surrogate_refused(exc)
    if half is not None:
        return UnstorableValue(f"a value {holds_surrogate(half)}")
    orig = getattr(exc, "orig", None) or exc
    state = getattr(orig, "sqlstate", None)
    first = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    if state == "22021" and "0x00" in first:  # character_not_in_repertoire
        return UnstorableValue(f"a value {NUL_REFUSED}")
    if state == "22P05":  # untranslatable_character
        return UnstorableValue(f"a value holds a character this database's encoding cannot store ({first})")
    if state == "54000" and first.startswith("row is too big"):  # program_limit_exceeded
        return UnstorableValue(
            f"a row is too big for PostgreSQL ({first}): its short values are kept in the row itself, which "
            "must fit one 8 kB page, so a row of many columns may not fit below the 1,599 columns a file may "
            "have; use fewer columns, or SQLite, which has no such bound")
    return None
