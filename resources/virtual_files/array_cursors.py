"""Iterate over an inline array: where each array's iteration stands, kept through the plain DB-API driver.

This is the one store operation that needs no row table, and the CLI runs it on every ``invoke etl.iterate``
over an inline array, so it stays clear of SQLAlchemy (importing it alone costs 0.4–0.6 s): ``sqlite3`` or
psycopg directly, one short write transaction per call. The table is the catalog's ``cop_array_cursor``.
An in-memory SQLite database lives in one connection, so it keeps the SQLAlchemy path.

Like every write transaction of the store, each call first reads the store's layout stamp
(:mod:`.layout`) inside its transaction and refuses a store laid out by a newer connector-ops. A store
without the stamp (never opened by the SQLAlchemy path), or of an older layout, is left to the SQLAlchemy
path, which creates the catalog and upgrades the store: this module reads and writes only this code's
layout, and never creates or changes a table (one process's first Iterate on a new store pays the import).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from connector_ops.kernel.secrets import mask_url
from connector_ops.resources.virtual_files.layout_version import LAYOUT_VERSION, STAMP_SQL, refuse_newer

if TYPE_CHECKING:
    import psycopg

TABLE = "cop_array_cursor"
#: the database's clock in the statement that moves a position (``moved_at``), as the SQLAlchemy path dates
#: it (:func:`.catalog.write_ended`)
_NOW = {"?": "CURRENT_TIMESTAMP", "%s": "clock_timestamp()"}


def digest_of(items: list[Any]) -> str:
    """The same array (whatever its keys' order) continues where its last call stopped."""
    return hashlib.sha256(json.dumps(items, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sqlite_path(url: str) -> str | None:
    """The file of a ``sqlite:///…`` URL, for Python's file calls; ``None`` for an in-memory database or another
    database's URL."""
    scheme, _, rest = url.partition("://")
    if scheme.split("+", 1)[0] != "sqlite":
        return None
    path = rest.removeprefix("/").split("?", 1)[0]
    if path in ("", ":memory:"):
        return None
    from connector_ops.resources.virtual_files.sqlite_names import host_path

    return host_path(path)  # the URL's UTF-8 text as Python's file calls take it (:mod:`.sqlite_names`)


def _value(cursor: psycopg.Cursor[Any]) -> Any:
    """The one value of a query that always returns one row (``SELECT to_regclass(…)``, ``EXISTS``); psycopg
    types ``fetchone()`` optional, for the queries that may return none."""
    row = cursor.fetchone()
    assert row is not None
    return row[0]


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


def holds_positions(database_url: str) -> bool:
    """Whether the database holds an inline array's position, found without creating anything: before
    layout 2 this module made ``cop_array_cursor`` by itself, so a store where only such Iterates ran has
    no catalog (``connector-ops gc`` must still find them). ``False`` for a database this module does not
    reach (one in memory)."""
    scheme = database_url.split("://", 1)[0].split("+", 1)[0]
    probe = f"SELECT EXISTS (SELECT 1 FROM {TABLE})"
    if scheme == "sqlite":
        import sqlite3
        from pathlib import Path

        path = sqlite_path(database_url)
        if path is None or not Path(path).expanduser().is_file():
            return False
        conn = sqlite3.connect(Path(path).expanduser().as_uri() + "?mode=ro", uri=True, timeout=60)
        try:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchone()
            return found is not None and bool(conn.execute(probe).fetchone()[0])
        finally:
            conn.close()
    if scheme in ("postgresql", "postgres"):
        import psycopg

        with psycopg.connect("postgresql://" + database_url.split("://", 1)[1]) as pg:  # not sqlite3's conn
            if _value(pg.execute("SELECT to_regclass(%s)", (TABLE,))) is None:
                return False
            return bool(_value(pg.execute(probe)))
    return False


def _is_current(stamp: tuple[int, str] | None, database_url: str) -> bool:
    """Whether the store is of this code's layout (``False``: unstamped or older, for the SQLAlchemy path to
    create or upgrade); a newer one is refused."""
    if stamp is None:
        return False
    refuse_newer(stamp[0], stamp[1], mask_url(database_url))
    return stamp[0] == LAYOUT_VERSION


def _step(execute: Callable[..., Any], mark: str, digest: str, items: list[Any], limit: int) -> tuple[list[Any], bool]:
    """One call's reads and writes inside the caller's transaction (``mark``: the driver's placeholder)."""
    row = execute(f"SELECT position FROM {TABLE} WHERE digest = {mark}", (digest,)).fetchone()
    position = row[0] if row else 0
    has_next = position + limit < len(items)
    if has_next:
        execute(f"INSERT INTO {TABLE} (digest, position, moved_at) VALUES ({mark}, {mark}, {_NOW[mark]}) "
                "ON CONFLICT (digest) DO UPDATE SET position = excluded.position, moved_at = excluded.moved_at",
                (digest, position + limit))
    else:
        execute(f"DELETE FROM {TABLE} WHERE digest = {mark}", (digest,))
    return items[position:position + limit], has_next


def _sqlite(path: str, digest: str, items: list[Any], limit: int, url: str) -> tuple[list[Any], bool] | None:
    import sqlite3
    from pathlib import Path

    if not Path(path).expanduser().is_file():
        return None  # a new store: the SQLAlchemy path creates it
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            stamp = conn.execute(STAMP_SQL).fetchone()
        except sqlite3.OperationalError as exc:  # no such table: never opened by the SQLAlchemy path
            if "no such table" not in str(exc):
                raise
            stamp = None
        if not _is_current(stamp, url):
            return None  # closing rolls the transaction back
        result = _step(conn.execute, "?", digest, items, limit)
        conn.execute("COMMIT")
        return result
    finally:
        conn.close()  # an open transaction (an error above) is rolled back


def _postgres(conninfo: str, digest: str, items: list[Any], limit: int, url: str) -> tuple[list[Any], bool] | None:
    import psycopg

    with psycopg.connect(conninfo) as conn:  # one transaction, committed on success
        stamped = _value(conn.execute("SELECT to_regclass('cop_store_layout')"))
        if not _is_current(conn.execute(STAMP_SQL).fetchone() if stamped is not None else None, url):
            return None
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (digest,))  # two calls on one array queue up
        return _step(conn.execute, "%s", digest, items, limit)
