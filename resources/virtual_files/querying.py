"""Querying and deleting rows by a MongoDB-style filter (compiled to SQL by :mod:`.filters`).

The first equality query on a column indexes it (once per virtual file); later queries are one read
transaction.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import sqlalchemy as sa

from connector_ops.kernel.disk import DiskBelowFloor
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.notices import warn
from connector_ops.kernel.progress import PHASE, track
from connector_ops.resources.virtual_files import catalog as cat
from connector_ops.resources.virtual_files import seq_floors
from connector_ops.resources.virtual_files.catalog import VirtualFileInfo, internal_name
from connector_ops.resources.virtual_files.core import StoreCore, mark_written
from connector_ops.resources.virtual_files.db_errors import INSUFFICIENT_PRIVILEGE, DatabaseRefused
from connector_ops.resources.virtual_files.engines import SQLITE_SORT_KIB, page_cache
from connector_ops.resources.virtual_files.filters import compile_filter, equality_columns, filter_warnings
from connector_ops.resources.virtual_files.rows import fetch_dicts, select_rows
from connector_ops.resources.virtual_files.shapes import Row
from connector_ops.resources.virtual_files.table_caches import TableCache

#: (database URL, table) of the files whose indexes this process may not build (its role does not own
#: them), and when it was refused: their Queries scan without asking again, which would cost a refused write
#: transaction each time. An LRU, a dropped table's entry going with it (:mod:`.table_caches`); asked again
#: after :data:`ASK_AGAIN_SECONDS`, as ownership may have been fixed meanwhile (it was once a set that only grew)
_NOT_OURS_TO_INDEX: TableCache[tuple[str, str], float] = TableCache(1024)
ASK_AGAIN_SECONDS = 600.0


def _not_ours_to_index(database_url: str, table_name: str) -> bool:
    refused = _NOT_OURS_TO_INDEX.get((database_url, table_name))
    return refused is not None and time.monotonic() - refused < ASK_AGAIN_SECONDS


class Querying(StoreCore):
    """Find and delete rows by filter; index the columns equality filters use."""

    def ensure_indexes(self, vf_id: str, names: Iterable[str]) -> None:
        """Index the given columns once, so repeated queries on them are fast."""
        with self.reading() as conn:
            info = self.info(conn, vf_id)
        self._create_indexes(info, names)

    def _create_indexes(self, info: VirtualFileInfo, names: Iterable[str]) -> bool:
        """Create the missing indexes on ``names``; ``False`` when there was nothing to do."""
        wanted = [o for n in names if (o := info.ordinal_of(n)) is not None and o not in info.indexed]
        if not wanted:
            return False
        with self.writing() as conn:
            info = self.info(conn, info.id, lock=True)
            table = info.table
            for ordinal in wanted:
                if ordinal in info.indexed:
                    continue
                with page_cache(conn, SQLITE_SORT_KIB):
                    _index(conn, f"ix_{info.table_name}_{internal_name(ordinal)}", table.c[internal_name(ordinal)])
                conn.execute(
                    sa.update(cat.vf_column)
                    .where((cat.vf_column.c.vf_id == info.id) & (cat.vf_column.c.ordinal == ordinal))
                    .values(indexed=True)
                )
        return True

    def find(self, vf_id: str, flt: Mapping[str, Any], *, limit: int | None = None,
             field: str = "query", progress: Callable[[int], object] | None = None) -> list[Row]:
        """Rows matching the filter, in row order.

        The first query on a column indexes it (once); later queries are one read transaction. An index only
        speeds the answer up, so with the disk below its floor (``CONNECTOR_OPS_MIN_FREE_DISK``), or on
        PostgreSQL under a role that does not own the file's table (only its owner may index it), the query
        scans instead of failing; the latter is remembered for the file's table for :data:`ASK_AGAIN_SECONDS`.
        """
        indexing = True
        while True:
            with self.reading() as conn:
                info = self.info(conn, vf_id)
                if not (indexing and self._needs_index(info, flt)
                        and not _not_ours_to_index(self.database_url, info.table_name)):
                    table = info.table
                    where = compile_filter(flt, info.column_map(table), field=field, dialect=conn.dialect.name,
                                           conn=conn)
                    _warn_about(flt, info, field)
                    query = select_rows(info).where(where).order_by(table.c.seq)
                    if limit is not None:
                        query = query.limit(limit)
                    with _parsed_by_sqlite(field):
                        return fetch_dicts(conn, info.names, query, progress)
            try:  # once per column, seconds on a million rows: a phase of its own before the Query's rows
                columns = ", ".join(equality_columns(flt))
                with track(f"query {vf_id}: indexing {columns}", None, PHASE):
                    self._create_indexes(info, equality_columns(flt))
            except DiskBelowFloor:
                indexing = False
            except DatabaseRefused as exc:
                if exc.sqlstate != INSUFFICIENT_PRIVILEGE:
                    raise
                _NOT_OURS_TO_INDEX.put((self.database_url, info.table_name), time.monotonic(), (info.table_name,))
                indexing = False

    @staticmethod
    def _needs_index(info: VirtualFileInfo, flt: Mapping[str, Any]) -> bool:
        return any((o := info.ordinal_of(n)) is not None and o not in info.indexed for n in equality_columns(flt))

    def delete_where(self, vf_id: str, flt: Mapping[str, Any], *, field: str = "request",
                     dry_run: bool = False) -> int:
        """Delete the rows matching the filter; returns how many were deleted. ``dry_run`` counts them in a
        read transaction instead (the same compiled filter, so the count is what a delete would remove)."""
        with self.reading() if dry_run else self.writing(grows=False) as conn:
            info = self.info(conn, vf_id, lock=not dry_run)
            table = info.table
            where = compile_filter(flt, info.column_map(table), field=field, dialect=conn.dialect.name, conn=conn)
            _warn_about(flt, info, field)
            with _parsed_by_sqlite(field):
                if dry_run:
                    return conn.execute(sa.select(sa.func.count()).select_from(table).where(where)).scalar_one()
                with seq_floors.deleting(conn, info):  # SQLite: an append never numbers rows as those taken
                    deleted = conn.execute(sa.delete(table).where(where)).rowcount
                if deleted:
                    mark_written(conn, vf_id)
                return deleted


@contextlib.contextmanager
def _parsed_by_sqlite(field: str) -> Iterator[None]:
    """A filter SQLite's parser cannot hold is a 400 naming ``field``, not a 500 "database error". Before
    SQLite 3.46.0 its stack is fixed (100 entries in 3.40), and each negation or AND/OR group that does not
    simplify away takes about two, so a filter within the 100 levels of JSON every input may nest can still be
    past it. From 3.46.0 the parser grows its stack on the heap instead, so no such filter reaches this there
    (SQLite's own expression depth limit, 1,000, is beyond what 100 levels of JSON make)."""
    try:
        yield
    except (sa.exc.OperationalError, sqlite3.OperationalError) as exc:  # fetch_dicts runs on the driver itself
        if "parser stack overflow" not in str(getattr(exc, "orig", exc)):
            raise
        raise InvalidInput(field, "the filter nests too deeply for SQLite (its parser ran out of stack): "
                                  "flatten it, e.g. $and/$or of many clauses instead of clauses nested in "
                                  "each other") from None


#: PostgreSQL's "program limit exceeded": a btree entry longer than its page allows (≈ 2.7 kB)
TOO_LONG_FOR_BTREE = "54000"


def _index(conn: sa.Connection, name: str, column: sa.ColumnElement) -> None:
    """A btree index on ``column``; on PostgreSQL, a hash index where a value is too long for a btree entry
    ("index row size 3016 exceeds btree version 4 maximum 2704", and the Query was a 500 for good). A hash
    index keeps a 4-byte hash whatever the value's length, and serves what this index is for: the ``=`` of
    equality and the ``= ANY`` of ``$in`` (as bitmap scans). The btree stays the common case, as fast as
    before: only its failure, inside a savepoint, costs the second build."""
    if conn.dialect.name != "postgresql":
        sa.Index(name, column).create(conn, checkfirst=True)
        return
    try:
        with conn.begin_nested():
            sa.Index(name, column).create(conn, checkfirst=True)
    except sa.exc.DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != TOO_LONG_FOR_BTREE:
            raise
        _hash_index(conn, name, column)


def _hash_index(conn: sa.Connection, name: str, column: sa.ColumnElement) -> None:
    """The hash index both :func:`_index` and :func:`hash_instead_of_btree` fall back to (PostgreSQL only)."""
    sa.Index(name, column, postgresql_using="hash").create(conn)


def hash_instead_of_btree(conn: sa.Connection, exc: BaseException) -> bool:
    """After ``exc`` (rolled back to a savepoint), make the btree index it names a hash index if it failed
    because a new value is too long for a btree entry, as :func:`_index` would have built it for that
    value; ``False`` when ``exc`` is another error. An Append of such a value to a column a Query had
    indexed failed so."""
    orig = getattr(exc, "orig", exc)  # COPY runs on the driver's own cursor: psycopg's error, unwrapped
    index = getattr(getattr(orig, "diag", None), "constraint_name", None)  # PostgreSQL names the index there
    if getattr(orig, "sqlstate", None) != TOO_LONG_FOR_BTREE or not index:
        return False
    found = conn.execute(sa.text(
        "SELECT t.relname, a.attname FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
        "WHERE i.indexrelid = to_regclass(:index)"), {"index": conn.dialect.identifier_preparer.quote(index)}
    ).one_or_none()
    if found is None:
        return False
    conn.exec_driver_sql(f"DROP INDEX {conn.dialect.identifier_preparer.quote(index)}")
    _hash_index(conn, index, sa.Table(found[0], sa.MetaData(), sa.Column(found[1])).c[found[1]])
    return True


def _warn_about(flt: Mapping[str, Any], info: VirtualFileInfo, field: str) -> None:
    for message in filter_warnings(flt, list(info.names), field):
        warn(message)
