"""Giving back the disk space of dropped virtual files on SQLite (``connector-ops gc``).

PostgreSQL removes a dropped table's files at once. SQLite keeps a dropped table's pages in its file, free for
later tables, and its write-ahead log stays as long as the longest write made it: three 300,000-row Pushes
then their Cleans left 104 MiB of database (75 % free pages) and a 130 MiB log beside 26 MiB of data.
``VACUUM`` writes the file again without its free pages (0.6 s for those 26 MiB), and a ``TRUNCATE``
checkpoint empties the log. It needs as much free disk as the data, and it waits for writers (the
connections' busy time-out), so it runs only from ``gc``, only when free pages are a good share of the file.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

import sqlalchemy as sa

from connector_ops.resources.virtual_files.checkpoints import before_write
from connector_ops.resources.virtual_files.disk_full import full_error, is_full
from connector_ops.resources.virtual_files.driver_connection import driver_of

#: compact when free pages are at least this share of the database file…
FREE_SHARE = 0.25
#: …and at least this many bytes (a small file is not worth rewriting)
FREE_BYTES = 8 << 20


@dataclass(frozen=True)
class Compaction:
    """The database's bytes on disk (its file and its log) before and after; ``busy`` when another connection
    held it (a writer past the busy time-out, or a reader that kept the log from being emptied)."""

    before: int
    after: int
    busy: bool = False


def _on_disk(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))


def compact_sqlite(engine: sa.Engine, path: str, *, dry_run: bool = False, min_free: int = 0) -> Compaction | None:
    """``VACUUM`` the SQLite database at ``path`` when its free pages are worth it (``None`` when they are
    not); in a dry run, only say what it would give back. A database in use by a writer for longer than the
    busy time-out is left as it is (``busy``). ``min_free``: the store's floor, which a full disk's message
    names."""
    raw = engine.raw_connection()  # VACUUM runs outside a transaction: not through the engine's BEGIN
    try:
        conn = driver_of(raw)
        pages, free, size = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                             for p in ("page_count", "freelist_count", "page_size"))
        if free < FREE_SHARE * pages or free * size < FREE_BYTES:
            return None
        before = _on_disk(path)
        if dry_run:  # VACUUM keeps the used pages; the TRUNCATE checkpoint after it empties the log (counted in before)
            return Compaction(before, (pages - free) * size)
        before_write(path)  # no background checkpoint of the file running: it would keep the log from emptying
        try:
            conn.execute("VACUUM")
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]  # 1: a reader kept the log
        except sqlite3.OperationalError as exc:
            if is_full(exc, path):  # VACUUM writes a copy of the database: no room for it, nothing changed
                raise full_error(path, min_free, done="gc's compaction (VACUUM) was rolled back; what gc removed "
                                                     "before it stays removed") from None
            if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):  # primary code
                raise
            busy = True
        return Compaction(before, _on_disk(path), busy=bool(busy))
    finally:
        raw.close()
