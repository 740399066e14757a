"""Iterate over an inline array: where each array's iteration stands, kept through the plain DB-API driver.

This is the one store operation that needs no row table, and the CLI runs it on every ``invoke etl.iterate``
over an inline array, so it stays clear of SQLAlchemy (importing it alone costs 0.4–0.6 s): ``sqlite3`` or
psycopg directly, one short write transaction per call. The table is the catalog's ``cop_array_cursor``
(created here when missing, exactly as the catalog declares it). An in-memory SQLite database lives in
one connection, so it keeps the SQLAlchemy path.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

TABLE = "cop_array_cursor"
_DDL = f"CREATE TABLE IF NOT EXISTS {TABLE} (digest VARCHAR(64) NOT NULL PRIMARY KEY, position BIGINT NOT NULL)"


def digest_of(items: list[Any]) -> str:
    """The same array (whatever its keys' order) continues where its last call stopped."""
    return hashlib.sha256(json.dumps(items, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sqlite_path(url: str) -> str | None:
    """The file of a ``sqlite:///…`` URL; ``None`` for an in-memory database or another database's URL."""
    scheme, _, rest = url.partition("://")
    if scheme.split("+", 1)[0] != "sqlite":
        return None
    path = rest.removeprefix("/").split("?", 1)[0]
    return None if path in ("", ":memory:") else path


def next_array_batch(database_url: str, items: list[Any], limit: int) -> tuple[list[Any], bool] | None:
    """The next ``limit`` items and whether more remain; ``None`` when this database needs SQLAlchemy."""
    scheme = database_url.split("://", 1)[0].split("+", 1)[0]
    digest = digest_of(items)
    if scheme == "sqlite":
        path = sqlite_path(database_url)
        return None if path is None else _sqlite(path, digest, items, limit)
    if scheme in ("postgresql", "postgres"):
        return _postgres("postgresql://" + database_url.split("://", 1)[1], digest, items, limit)
    return None


def _step(execute: Callable[..., Any], mark: str, digest: str, items: list[Any], limit: int) -> tuple[list[Any], bool]:
    """One call's reads and writes inside the caller's transaction (``mark``: the driver's placeholder)."""
    row = execute(f"SELECT position FROM {TABLE} WHERE digest = {mark}", (digest,)).fetchone()
    position = row[0] if row else 0
    has_next = position + limit < len(items)
    if has_next:
        execute(f"INSERT INTO {TABLE} (digest, position) VALUES ({mark}, {mark}) "
                "ON CONFLICT (digest) DO UPDATE SET position = excluded.position", (digest, position + limit))
    else:
        execute(f"DELETE FROM {TABLE} WHERE digest = {mark}", (digest,))
    return items[position:position + limit], has_next


def _sqlite(path: str, digest: str, items: list[Any], limit: int) -> tuple[list[Any], bool]:
    import sqlite3
    from pathlib import Path

    Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)  # as the engine does
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(_DDL)
        conn.execute("BEGIN IMMEDIATE")
        result = _step(conn.execute, "?", digest, items, limit)
        conn.execute("COMMIT")
        return result
    finally:
        conn.close()  # an open transaction (an error above) is rolled back


def _postgres(conninfo: str, digest: str, items: list[Any], limit: int) -> tuple[list[Any], bool]:
    import psycopg

    with psycopg.connect(conninfo) as conn:  # one transaction, committed on success
        if conn.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()[0] is None:
            conn.execute(_DDL)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (digest,))  # two calls on one array queue up
        return _step(conn.execute, "%s", digest, items, limit)
