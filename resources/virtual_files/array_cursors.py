"""Iterate over an inline array: where each array's iteration stands, kept through the plain DB-API driver.

This is the one store operation that needs no row table, and the CLI runs it on every ``invoke etl.iterate``
over an inline array, so it stays clear of SQLAlchemy (importing it alone costs 0.4–0.6 s): ``sqlite3`` or
psycopg directly, one short write transaction per call. The table is the catalog's ``cop_array_cursor``
(created here when missing, exactly as the catalog declares it). An in-memory SQLite database lives in
one connection, so it keeps the SQLAlchemy path.

Like every write transaction of the store, each call first reads the store's layout stamp
(:mod:`.layout`) inside its transaction and refuses a store laid out by a newer connector-ops; a store
without the stamp's table has never been opened by the SQLAlchemy path and is layout 1.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from connector_ops.kernel.secrets import mask_url
from connector_ops.resources.virtual_files.layout_version import STAMP_SQL, refuse_newer

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
        return None if path is None else _sqlite(path, digest, items, limit, database_url)
    if scheme in ("postgresql", "postgres"):
        return _postgres("postgresql://" + database_url.split("://", 1)[1], digest, items, limit, database_url)
    return None


def _check_stamp(stamp: tuple[int, str] | None, database_url: str) -> None:
    if stamp is not None:
        refuse_newer(stamp[0], stamp[1], mask_url(database_url))


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


def _sqlite(path: str, digest: str, items: list[Any], limit: int, url: str) -> tuple[list[Any], bool]:
    import sqlite3
    from pathlib import Path

    Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)  # as the engine does
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(_DDL)
        conn.execute("BEGIN IMMEDIATE")
        try:
            stamp = conn.execute(STAMP_SQL).fetchone()
        except sqlite3.OperationalError as exc:  # no such table: never opened by the SQLAlchemy path
            if "no such table" not in str(exc):
                raise
            stamp = None
        _check_stamp(stamp, url)
        result = _step(conn.execute, "?", digest, items, limit)
        conn.execute("COMMIT")
        return result
    finally:
        conn.close()  # an open transaction (an error above) is rolled back


def _postgres(conninfo: str, digest: str, items: list[Any], limit: int, url: str) -> tuple[list[Any], bool]:
    import psycopg

    with psycopg.connect(conninfo) as conn:  # one transaction, committed on success
        cursors, stamped = conn.execute("SELECT to_regclass(%s), to_regclass('cop_store_layout')", (TABLE,)).fetchone()
        _check_stamp(conn.execute(STAMP_SQL).fetchone() if stamped is not None else None, url)
        if cursors is None:
            conn.execute(_DDL)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (digest,))  # two calls on one array queue up
        return _step(conn.execute, "%s", digest, items, limit)
