"""Bulk row loading, the hot path of Push/Append/Map: each dialect's fastest way in.

SQLite: the driver's ``executemany`` inside the surrounding transaction (SQLAlchemy's per-row parameter
processing costs more than the insert itself). PostgreSQL: psycopg 3 ``COPY … FROM STDIN`` with
plain text batches (tab-joined in C) or ``write_row`` in binary format — 10× faster than executemany
(research/etl.md §2).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from connector_ops.errors import InvalidInput


def insert_rows(conn: sa.Connection, table_name: str, columns: Sequence[str], rows: Iterable[Sequence]) -> int:
    """Insert ``rows`` (tuples aligned with ``columns``, internal names) into ``table_name``."""
    if conn.dialect.name == "postgresql":
        return _copy_rows(conn, table_name, columns, rows)
    return _executemany_rows(conn, table_name, columns, rows)


def _quote(conn: sa.Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote_identifier(name)


def _executemany_rows(conn: sa.Connection, table_name: str, columns: Sequence[str], rows: Iterable[Sequence]) -> int:
    rows = rows if isinstance(rows, list) else list(rows)
    if not rows:
        return 0
    cols = ", ".join(_quote(conn, c) for c in columns)
    marks = ", ".join("?" for _ in columns)
    cursor = conn.connection.driver_connection.cursor()
    try:
        if columns:
            cursor.executemany(f"INSERT INTO {_quote(conn, table_name)} ({cols}) VALUES ({marks})", rows)
        else:
            cursor.executemany(f"INSERT INTO {_quote(conn, table_name)} DEFAULT VALUES", [() for _ in rows])
    finally:
        cursor.close()
    return len(rows)


def _copy_rows(conn: sa.Connection, table_name: str, columns: Sequence[str], rows: Iterable[Sequence]) -> int:
    import psycopg
    from psycopg import sql

    rows = rows if isinstance(rows, list) else list(rows)
    target = sql.SQL("{} ({})").format(
        sql.Identifier(table_name), sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    )
    with conn.connection.driver_connection.cursor() as cursor:
        if not columns:  # a row without any column: nothing to COPY, insert defaults
            for _ in rows:
                cursor.execute(sql.SQL("INSERT INTO {} DEFAULT VALUES").format(sql.Identifier(table_name)))
            return len(rows)
        try:
            text = _as_copy_text(rows, len(columns))
            if text is not None:
                with cursor.copy(sql.SQL("COPY {} FROM STDIN").format(target)) as copy:
                    copy.write(text)
            else:
                with cursor.copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(target)) as copy:
                    copy.set_types(["text"] * len(columns))
                    for row in rows:
                        copy.write_row(row)
        except psycopg.errors.DataError as exc:
            if "0x00" in str(exc):
                raise InvalidInput("", "a value holds a NUL character (\\x00), which PostgreSQL cannot store") from None
            raise
    return len(rows)


def _as_copy_text(rows: list[Sequence], width: int) -> bytes | None:
    """The batch in COPY's text format when no value needs escaping, else ``None``.

    Joining with tabs and newlines runs in C; a count of the separators proves no value held one, so
    the server parses plain text (measured 1.2× raw ``COPY`` of the CSV bytes, against 1.8× for
    ``write_row``). Batches with NULLs, tabs, newlines or backslashes take the binary ``write_row`` path.
    """
    try:
        text = "\n".join(map("\t".join, rows))
    except TypeError:  # a None (NULL) value
        return None
    if (text.count("\t") != len(rows) * (width - 1) or text.count("\n") != len(rows) - 1
            or "\\" in text or "\r" in text):
        return None
    return (text + "\n").encode()
