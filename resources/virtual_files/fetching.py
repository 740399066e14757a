"""Read rows through the database driver's own cursor: the hot path of Iterate, Query and Pull.

SQLAlchemy builds and compiles the statement (so every value stays a bound parameter), but rows are
fetched as the driver's plain tuples: SQLAlchemy's per-row ``Row`` processing costs more than the
fetch itself on a 10,000-row page. PostgreSQL streams through a server-side (named) cursor, so a long
export never holds more than one page in memory.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa
from sqlalchemy.sql.util import find_tables

from connector_ops.resources.virtual_files.driver_connection import driver_of
from connector_ops.resources.virtual_files.table_caches import TableCache

if TYPE_CHECKING:
    from sqlalchemy.sql.compiler import SQLCompiler

_names = itertools.count()
#: a page's values, bytes: wider rows are fetched fewer at a time (:func:`_rows_for`) …
PAGE_BYTES = 4 << 20
#: … but never fewer than this many (each fetch costs a round trip on PostgreSQL)
MIN_PAGE_ROWS = 100
#: the rows of the first page whose width is measured
SAMPLE_ROWS = 100


#: compiled statements by dialect and shape, filed under the row tables they read or write: an LRU, and a
#: dropped table's entries go with it (:mod:`.table_caches`)
_COMPILED: TableCache[tuple[str, Any], SQLCompiler] = TableCache(500)


def _compile(conn: sa.Connection, stmt: sa.ClauseElement) -> tuple[str, Any]:
    """SQL text and driver parameters; compiled forms are cached by statement shape, as SQLAlchemy's
    own ``execute`` does (compiling a SELECT costs about as much as running an indexed query)."""
    key = stmt._generate_cache_key()
    compiled: SQLCompiler | None  # what compile() gives a statement (typed as the base Compiled)
    if key is None or any(b.expanding for b in key.bindparams):  # IN lists: the SQL depends on their length
        compiled = cast("SQLCompiler", stmt.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True}))
        params = compiled.params
    else:
        shape = (conn.dialect.name, key.key)
        compiled = _COMPILED.get(shape)
        if compiled is None:  # its tables found only now: the walk of the statement cost 23 of a hit's 30 µs
            compiled = _COMPILED.put(shape, cast("SQLCompiler", stmt.compile(dialect=conn.dialect, cache_key=key)),
                                     [t.name for t in find_tables(stmt, include_crud=True)])
        params = compiled.construct_params(extracted_parameters=key.bindparams)
    if compiled.positiontup is not None:
        return compiled.string, tuple(params[name] for name in compiled.positiontup)
    return compiled.string, params


def fetch_all(conn: sa.Connection, stmt: sa.ClauseElement) -> list[tuple]:
    """All rows of ``stmt`` as driver tuples."""
    with _executed(conn, stmt) as cursor:
        return cursor.fetchall()


def fetch_pages(conn: sa.Connection, stmt: sa.ClauseElement, size: int) -> Iterator[list[tuple]]:
    """The rows of ``stmt`` as driver tuples, ``size`` at a time, from one client-side cursor (one round
    trip): for a result the caller keeps whole anyway, but converts a page at a time, so that beside what it
    built only one page of tuples is alive."""
    with _executed(conn, stmt) as cursor:
        yield from _pages(cursor, size)


@contextlib.contextmanager
def _executed(conn: sa.Connection, stmt: sa.ClauseElement) -> Iterator[Any]:
    sql, params = _compile(conn, stmt)
    cursor = driver_of(conn.connection).cursor()
    try:
        with _disconnects_seen(conn, cursor):
            cursor.execute(sql, params)
            yield cursor
    finally:
        cursor.close()


@contextlib.contextmanager
def _disconnects_seen(conn: sa.Connection, cursor: Any) -> Iterator[None]:
    """A driver error that ended the session (the server's ``idle_in_transaction_session_timeout``, a restart)
    invalidates ``conn``, as SQLAlchemy's own ``execute`` does by the dialect's same test, then goes on as
    itself. Unseen, SQLAlchemy rolled the transaction back on the dead session as it ended, and that failure,
    "the connection is lost", replaced the server's reason: a Pull said less than a Query on the same fault."""
    try:
        yield
    except conn.dialect.loaded_dbapi.Error as exc:
        if not conn.invalidated and conn.dialect.is_disconnect(exc, conn.connection.dbapi_connection, cursor):
            conn.invalidate(exc)
        raise


def stream(conn: sa.Connection, stmt: sa.ClauseElement, batch_size: int) -> Iterator[list[tuple]]:
    """Rows of ``stmt`` in pages of ``batch_size`` driver tuples, in bounded memory."""
    sql, params = _compile(conn, stmt)
    driver = driver_of(conn.connection)
    if conn.dialect.name == "postgresql":
        cursor = driver.cursor(name=f"cop_stream_{next(_names)}")
        cursor.itersize = batch_size
    else:
        cursor = driver.cursor()
    try:
        with _disconnects_seen(conn, cursor):
            cursor.execute(sql, params)
            yield from _pages(cursor, batch_size)
    finally:
        cursor.close()


def _pages(cursor: Any, size: int) -> Iterator[list[tuple]]:
    """``fetchmany(size)`` until the cursor is done, fewer rows at a time where the first page's rows are
    wide (:func:`_rows_for`). A page is let go before the next is fetched: a loop variable would keep it
    alive while the consumer works on it and while the driver builds the next (a Map then held two pages at
    once, and ran slower for it)."""
    rows = cursor.fetchmany(size)
    if rows:
        size = _rows_for(rows, size)
    while rows:
        yield rows
        del rows
        rows = cursor.fetchmany(size)


def _rows_for(page: list[tuple], size: int) -> int:
    """How many rows like the first of ``page`` make about :data:`PAGE_BYTES` of values, at most ``size``
    and at least :data:`MIN_PAGE_ROWS`. A page's rows are Python strings, then the page as its consumer
    writes it (CSV text, its bytes, Arrow arrays): 10,000 rows of 1 KiB were ≈ 40 MiB at once, and a Pull
    of them was OOM-killed in a 96 MiB container; rows of a few short values keep the whole ``size``."""
    sample = page[:SAMPLE_ROWS]
    width = sum(len(value) for row in sample for value in row if isinstance(value, (str, bytes))) / len(sample)
    return size if width * size <= PAGE_BYTES else max(MIN_PAGE_ROWS, int(PAGE_BYTES // width))
