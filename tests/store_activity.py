"""What another process does to a store, seen from the test: writing now, running a long statement such as a
Join, and tables the catalog does not know (what an interrupted writer would leave if its transaction had
not rolled back)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

import sqlalchemy as sa

from connector_ops.resources.virtual_files.engines import get_engine


def writing(url: str) -> bool:
    """Whether another process writes to the store at ``url`` now: SQLite's write lock is taken; PostgreSQL
    lists a ``CREATE TABLE`` (the Join's) as active."""
    if url.startswith("sqlite"):
        probe = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:  # database is locked
            return True
        finally:
            probe.close()
    with get_engine(url).connect() as conn:
        return bool(conn.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
            "AND datname = current_database() AND query LIKE 'CREATE TABLE%'")).scalar_one())


def joining(url: str) -> Callable[[], bool]:
    """Whether another process's Join statement runs: it has written for half a second without a break
    (a step's output or a file's catalog entry is written in milliseconds)."""
    since: list[float] = []

    def long_write() -> bool:
        if not writing(url):
            since.clear()
            return False
        since[:] = since or [time.monotonic()]
        return time.monotonic() - since[0] >= 0.5
    return long_write


def row_tables(url: str) -> set[str]:
    """The virtual files' row tables in the database, whether the catalog names them or not."""
    return {name for name in sa.inspect(get_engine(url)).get_table_names() if name.startswith("vf_")}


def orphans(url: str) -> set[str]:
    """Row tables in the database that no catalog entry names."""
    with get_engine(url).connect() as conn:
        named = set(conn.execute(sa.text("SELECT table_name FROM cop_virtual_file")).scalars())
    return row_tables(url) - named


def open_snapshots(url: str, vf_id: str) -> int:
    """Read snapshots of the virtual file ``vf_id`` still open, by any connection but the probe's own.
    SQLite (a database file per test, so any reader counts): a reader keeps a full checkpoint from finishing
    for as long as it reads; a checkpoint the store runs meanwhile (in this process's background thread or in
    the loader process) only until it ends, so the probe tries for 5 s. PostgreSQL: other sessions holding a
    lock on the file's row table (the server is shared with other tests, whose sessions are not this file's
    business)."""
    if url.startswith("sqlite"):
        deadline = time.monotonic() + 5
        while True:
            probe = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
            try:
                busy, _, _ = probe.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                probe.close()
            if not busy or time.monotonic() > deadline:
                return int(busy)
            time.sleep(0.05)
    with get_engine(url).connect() as conn:
        return int(conn.execute(sa.text(
            "SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "JOIN cop_virtual_file f ON f.table_name = c.relname "
            "WHERE f.id = :vf AND l.pid <> pg_backend_pid()"), {"vf": vf_id}).scalar_one())
