"""Bulk row loading, the hot path of Push/Append/Map: each dialect's fastest way in.

SQLite: the driver's ``executemany`` inside the surrounding transaction (SQLAlchemy's per-row parameter
processing costs more than the insert itself). PostgreSQL: psycopg 3 ``COPY … FROM STDIN`` in text
format — 10× faster than executemany (research/etl.md §2). A whole stream of batches goes through one
``COPY``, so the server stores rows while we parse the next ones: one ``COPY`` per batch would make the
two wait for each other (measured 2.6× raw ``COPY`` for Push, against 1.3× streamed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from connector_ops.resources.virtual_files.db_errors import (
    INSUFFICIENT_PRIVILEGE,
    ROLE,
    lock_table_full,
    permission_denied,
    sqlstate_of,
)
from connector_ops.resources.virtual_files.driver_connection import driver_of


def insert_rows(conn: sa.Connection, table_name: str, columns: Sequence[str], rows: Iterable[Sequence]) -> int:
    """Insert ``rows`` (sequences aligned with ``columns``, internal names) into ``table_name``."""
    return insert_batches(conn, table_name, columns, [rows if isinstance(rows, list) else list(rows)])


def insert_batches(conn: sa.Connection, table_name: str, columns: Sequence[str],
                   batches: Iterable[Sequence[Sequence]]) -> int:
    """Insert every batch of ``batches`` (consumed lazily, in order). Nothing else may use ``conn``
    until this returns: on PostgreSQL the batches stream through one open ``COPY``. A batch is let go
    once stored, before the next is asked for: a ``for`` loop's variable would keep it alive while the
    producer builds the next one, and a Map then held two pages of rows (1M rows: peak 62 → 53 MiB once
    no stage did)."""
    if not columns:  # rows without any column: nothing to COPY, insert defaults
        return _default_rows(conn, table_name, batches)
    if conn.dialect.name == "postgresql":
        return _copy_batches(conn, table_name, columns, batches)
    return _executemany_batches(conn, table_name, columns, batches)


def _quote(conn: sa.Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote_identifier(name)


def _default_rows(conn: sa.Connection, table_name: str, batches: Iterable[Sequence[Sequence]]) -> int:
    n = sum(len(batch) for batch in batches)
    statement = sa.text(f"INSERT INTO {_quote(conn, table_name)} DEFAULT VALUES")
    for _ in range(n):
        conn.execute(statement)
    return n


def _executemany_batches(conn: sa.Connection, table_name: str, columns: Sequence[str],
                         batches: Iterable[Sequence[Sequence]]) -> int:
    cols = ", ".join(_quote(conn, c) for c in columns)
    marks = ", ".join("?" for _ in columns)
    statement = f"INSERT INTO {_quote(conn, table_name)} ({cols}) VALUES ({marks})"
    cursor = driver_of(conn.connection).cursor()
    n = 0
    try:
        for batch in batches:
            if batch:
                cursor.executemany(statement, batch)
                n += len(batch)
            del batch  # not alive while the producer builds the next one (see :func:`insert_batches`)
    finally:
        cursor.close()
    return n


#: buffers (≤ 512 KiB each) queued for psycopg's COPY writer thread at most
COPY_QUEUE = 8


def copy_sql(table_name: str, columns: Sequence[str], options: str = "", **literals: str) -> Any:
    """``COPY table (columns) FROM STDIN`` and ``options``: a template in which ``{columns}`` is the column
    list again and every other field one of ``literals``, quoted as SQL literals."""
    from psycopg import sql

    return sql.SQL("COPY {table} ({columns}) FROM STDIN" + options).format(
        table=sql.Identifier(table_name), columns=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        **{name: sql.Literal(value) for name, value in literals.items()})


def open_copy(cursor: Any, statement: Any) -> Any:
    """``cursor.copy(statement)`` whose writer thread queues at most ``COPY_QUEUE`` buffers.

    psycopg writes ``COPY`` data from a thread so that we parse while it sends, but its queue holds 1,024
    buffers: when the server stores rows more slowly than Arrow parses them (a quiet client, a busy
    server), a Push queued 115 MiB. A short queue keeps the overlap and bounds the memory.

    A ``COPY`` that ends on an error or an interrupt waits for that thread, and the thread waits for the
    network with no limit: with the network to the server stopped, a stopped Push waited for ever when the
    thread was caught inside a write (a loopback proxy frozen at a quarter of the file: 1 run in 19;
    ``tests/test_etl_network_frozen.py`` freezes it at three quarters, and waited every time). That end is
    ``CancellingConnection.bounded``: cancelled after ``CANCEL_SECONDS``, given up (its socket shut, which
    ends the thread's write with an error) ``CANCEL_SECONDS`` later."""
    from psycopg.copy import QueuedLibpqWriter

    class Writer(QueuedLibpqWriter):
        def finish(self, exc: BaseException | None = None) -> None:
            bounded = getattr(self.connection, "bounded", None)  # the store's connections have it
            if exc is None or bounded is None:
                super().finish(exc)
                return
            with bounded():
                super().finish(exc)

    writer = Writer(cursor)
    # psycopg has no option for it; its worker reads this. Its own queue class (a queue.Queue), shorter
    writer._queue = type(writer._queue)(maxsize=COPY_QUEUE)
    return cursor.copy(statement, writer=writer)


def _copy_batches(conn: sa.Connection, table_name: str, columns: Sequence[str],
                  batches: Iterable[Sequence[Sequence]]) -> int:
    statement = copy_sql(table_name, columns)
    n = 0
    try:
        with driver_of(conn.connection).cursor() as cursor, open_copy(cursor, statement) as copy:
            for batch in batches:
                if batch:
                    copy.write(copy_text(batch, len(columns)))
                    n += len(batch)
                del batch  # see _executemany_batches
    except Exception as exc:  # the driver's own: a raw COPY passes no SQLAlchemy hook (db_errors.install)
        if sqlstate_of(exc) == INSUFFICIENT_PRIVILEGE:
            raise permission_denied(exc, role=conn.info.get(ROLE), statement="COPY") from None
        if (full := lock_table_full(exc)) is not None:
            raise full from None
        raise
    return n  # a value PostgreSQL cannot hold is worded by the store's ``writing`` (core.unstorable_value)


def copy_text(rows: Sequence[Sequence], width: int) -> bytes:
    """A batch in ``COPY``'s text format.

    Fast path: join with tabs and newlines in C; a count of the separators proves that no value held
    one (and no backslash or CR), so nothing needed escaping. Otherwise every value is escaped and
    ``None`` written as ``\\N`` (NULL).
    """
    try:
        text = "\n".join(map("\t".join, rows))
    except TypeError:  # a None (NULL) value
        pass
    else:
        if (text.count("\t") == len(rows) * (width - 1) and text.count("\n") == len(rows) - 1
                and "\\" not in text and "\r" not in text):
            return (text + "\n").encode()
    return ("\n".join("\t".join(map(_escape, row)) for row in rows) + "\n").encode()


def _escape(value: str | None) -> str:
    if value is None:
        return "\\N"
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
