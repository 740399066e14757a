"""SQLite: a file never numbers two rows with the same ``seq``, as PostgreSQL's sequence never does.

A row table's ``seq`` is SQLite's rowid (``INTEGER PRIMARY KEY`` without ``AUTOINCREMENT``), and a new row
gets the largest ``seq`` + 1: after a Delete Rows took a file's last rows, the next Append Rows numbered its
rows with the numbers just taken, and a running Iterate (``seq > last_seq``) never returned them — nor a
fan-out batch planned before (``after_seq < seq <= upto_seq``), which meant other rows.

So the Delete Rows that takes a file's last rows notes the largest ``seq`` the file had
(``cop_virtual_file.seq_floor``, :func:`deleting`), and an append to a file whose rows end below that floor
first puts a row at the floor, so that SQLite numbers the new rows past it, and takes it out again before its
transaction ends (:func:`appending`; no reader sees it). Only those two write into a table whose numbers
someone may have read: a Push, Map, Join or Validate makes a new table (a new file, or a new generation whose
iterations start over), so none of them pays anything.

Not ``AUTOINCREMENT``: SQLite cannot add it to a table without copying the table, so the files of stores
made before would have kept reusing numbers; and it reads and writes ``sqlite_sequence`` at every insert
statement, where the floor costs one lookup per append and per delete.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import sqlalchemy as sa

from connector_ops.resources.virtual_files import catalog as cat
from connector_ops.resources.virtual_files.catalog import VirtualFileInfo


@contextlib.contextmanager
def deleting(conn: sa.Connection, info: VirtualFileInfo) -> Iterator[None]:
    """Around a delete of rows of ``info``'s file: when it takes the file's last row, the file's floor
    becomes the largest ``seq`` it had (or stays a higher floor still unused)."""
    if conn.dialect.name != "sqlite":
        yield
        return
    top = _largest(conn, info)
    yield
    if top is not None and (_largest(conn, info) or 0) < top:
        vf = cat.virtual_file
        floor = sa.func.max(sa.func.coalesce(vf.c.seq_floor, 0), top)  # SQLite's max of two values
        conn.execute(sa.update(vf).where(vf.c.id == info.id).values(seq_floor=floor))


@contextlib.contextmanager
def appending(conn: sa.Connection, info: VirtualFileInfo) -> Iterator[None]:
    """Around an append to ``info``'s file: the rows written in the block are numbered past its floor."""
    if conn.dialect.name != "sqlite":
        yield
        return
    vf = cat.virtual_file
    floor = conn.execute(sa.select(vf.c.seq_floor).where(vf.c.id == info.id)).scalar()
    if floor is None or (_largest(conn, info) or 0) >= floor:
        yield
        return
    seq = info.table.c.seq
    conn.execute(sa.insert(info.table).values(seq=floor))  # the next rows get floor + 1, …
    yield
    conn.execute(sa.delete(info.table).where(seq == floor))


def _largest(conn: sa.Connection, info: VirtualFileInfo) -> int | None:
    """The file's largest ``seq`` (SQLite reads it from the end of the table's b-tree)."""
    return conn.execute(sa.select(sa.func.max(info.table.c.seq))).scalar()
