"""Writing virtual files: create (or replace) one and fill it, append rows, drop it.

A new file exists only if its whole load succeeds; an append to several files is one transaction.
:class:`RowWriter` adds rows to one row table inside an open transaction; it never leaves the store.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import cast

import sqlalchemy as sa

from connector_ops.kernel.errors import InvalidInput, NotFound
from connector_ops.kernel.limits import check_column_count, name_problem
from connector_ops.kernel.scoped import batched
from connector_ops.resources.virtual_files import catalog as cat
from connector_ops.resources.virtual_files import seq_floors
from connector_ops.resources.virtual_files.catalog import VirtualFileInfo, internal_name, row_table
from connector_ops.resources.virtual_files.core import StoreCore, as_utc, mark_written
from connector_ops.resources.virtual_files.engines import SQLITE_LOAD_KIB, page_cache
from connector_ops.resources.virtual_files.loaders import insert_batches
from connector_ops.resources.virtual_files.querying import hash_instead_of_btree
from connector_ops.resources.virtual_files.shapes import SCAN_BATCH, Values
from connector_ops.resources.virtual_files.table_caches import drop_row_table, forget_tables


class RowWriter:
    """Adds rows to one row table inside an open transaction, growing its columns as needed.

    A file made by :meth:`Writing.create` starts *unbuilt*: its row table is only named, and the columns its
    first rows bring join the one ``CREATE TABLE`` that the first write (or the block's end) issues. On
    SQLite every ``ALTER TABLE … ADD COLUMN`` re-reads the whole schema, one table per virtual file: a
    1-row, 10-column JSON Push that made an empty table and added each key took 0.8 s in a store of 5,000
    files and 2.2 s at 20,000, a ``CREATE TABLE`` with its columns a millisecond.
    """

    def __init__(self, conn: sa.Connection, info: VirtualFileInfo, field: str = "", *,
                 unbuilt: bool = False) -> None:
        self.conn = conn
        self.field = field  # the input field new column names come from, for error messages
        self.vf_id, self.table_name = info.id, info.table_name
        self.names: list[str] = list(info.names)
        self.ordinals: list[int] = list(info.ordinals)
        self.replaced: VirtualFileInfo | None = None  # create(replace=…): the old rows, still readable here
        self.unbuilt = unbuilt  # the row table is not created yet (:meth:`build`)
        mark_written(conn, info.id)  # dated when the transaction ends, as every virtual file written

    def ensure_columns(self, names: Iterable[str]) -> None:
        """Add the columns in ``names`` that the virtual file does not have yet (in that order): catalogued
        together, and in the row table's ``CREATE TABLE`` while it is unbuilt, else altered into it."""
        known = set(self.names)
        new = [n for n in dict.fromkeys(names) if n not in known]
        if not new:
            return
        check_column_count(len(self.names) + len(new), self.field)  # before the database is touched
        for name in new:
            if (problem := name_problem(name)) is not None:
                raise InvalidInput(self.field, f"column name {name!r} {problem}")
        start = (max(self.ordinals) + 1) if self.ordinals else 0
        ordinals = list(range(start, start + len(new)))
        self.conn.execute(sa.insert(cat.vf_column), [
            {"vf_id": self.vf_id, "ordinal": o, "name": n, "indexed": False} for n, o in zip(new, ordinals, strict=True)
        ])
        if not self.unbuilt:
            add_columns(self.conn, self.table_name, ordinals)
        self.names += new
        self.ordinals += ordinals

    def build(self) -> None:
        """Create the row table of an unbuilt file with every column it has by now (nothing if built)."""
        if self.unbuilt:
            row_table(self.table_name, self.ordinals).create(self.conn)
            self.unbuilt = False

    def write_tuples(self, names: Sequence[str], rows: Iterable[Values]) -> int:
        """Rows as tuples aligned with ``names`` (user column names already in the file)."""
        return self.write_batches(names, [rows if isinstance(rows, list) else list(rows)])

    def write_batches(self, names: Sequence[str], batches: Iterable[Sequence[Values]]) -> int:
        """A stream of row batches, loaded in one go (one ``COPY`` on PostgreSQL): the database stores
        rows while the caller produces the next batch. Nothing else may use the connection meanwhile."""
        index = {n: o for n, o in zip(self.names, self.ordinals, strict=True)}
        internal = [internal_name(index[n]) for n in names]
        if self.unbuilt:  # built by the first rows: until then their columns may still grow
            batches = iter(batches)
            first = next(batches, None)
            if first is None:
                return 0
            self.build()
            batches = itertools.chain([first], batches)
        return insert_batches(self.conn, self.table_name, internal, batches)

    def write_dicts(self, rows: Sequence[Mapping[str, str | None]]) -> int:
        """Rows as dicts; new keys become new columns first. Rows that all have the first one's keys (a
        reader's usual batch) are aligned in C by one ``itemgetter``, with no step per row in Python."""
        if not rows:
            return 0
        keys = rows[0].keys()
        dicts = cast("Sequence[dict[str, str | None]]", rows)  # what they are when the test below holds
        if len(keys) > 1 and set(map(type, rows)) == {dict} and all(map(keys.__eq__, map(dict.keys, dicts))):
            names = list(keys)
            self.ensure_columns(names)
            return self.write_tuples(names, list(map(operator.itemgetter(*names), rows)))
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row))
        self.ensure_columns(seen)
        names = list(seen)
        return self.write_tuples(names, ([row.get(n) for n in names] for row in rows))


def add_columns(conn: sa.Connection, table_name: str, ordinals: Sequence[int]) -> None:
    """Add TEXT columns ``ordinals`` to a row table that exists: one ``ALTER TABLE`` on PostgreSQL; SQLite
    takes one column per ``ALTER`` (each re-reads the schema: the reason new files are built unaltered)."""
    quote = conn.dialect.identifier_preparer.quote_identifier
    adds = [f"ADD COLUMN {quote(internal_name(o))} TEXT" for o in ordinals]
    if conn.dialect.name == "postgresql":
        adds = [", ".join(adds)]
    for add in adds:
        conn.exec_driver_sql(f"ALTER TABLE {quote(table_name)} {add}")


class Writing(StoreCore):
    """Creating, replacing, appending to and dropping virtual files."""

    @contextlib.contextmanager
    def create(self, columns: Sequence[str] = (), *, replace: str | None = None, field: str = "",
               copied_from: str | None = None) -> Iterator[RowWriter]:
        """A new virtual file, filled inside the ``with`` block; it exists only if the block succeeds.

        With ``replace=vf_id`` the rows of that virtual file are swapped for the new ones atomically
        (same id, new generation: running iterations start over). ``copied_from``: a new file's origin
        (:meth:`new_file`).
        """
        with self.writing() as conn, page_cache(conn, SQLITE_LOAD_KIB):
            if replace is None:
                old, writer = None, self.new_file(conn, columns, field, unbuilt=True, copied_from=copied_from)
            else:
                old = self.info(conn, replace, lock=True)
                conn.execute(sa.delete(cat.vf_column).where(cat.vf_column.c.vf_id == replace))
                conn.execute(sa.delete(cat.vf_cursor).where(cat.vf_cursor.c.vf_id == replace))
                info = self.new_table(conn, replace, columns, build=False)
                conn.execute(
                    sa.update(cat.virtual_file)
                    .where(cat.virtual_file.c.id == replace)
                    .values(table_name=info.table_name, generation=old.generation + 1, seq_floor=None)
                )
                self.catalogue_columns(conn, info)
                writer = RowWriter(conn, info, field, unbuilt=True)
            writer.replaced = old
            yield writer
            writer.build()  # a file no row reached has a table all the same
            if old is not None:
                drop_row_table(conn, old.table)

    def new_file(self, conn: sa.Connection, columns: Sequence[str] = (), field: str = "", *,
                 unbuilt: bool = False, copied_from: str | None = None) -> RowWriter:
        """A new virtual file inside the caller's ``writing()`` transaction (several files, one commit).

        Nesting ``create()`` instead would open a second writer, which on SQLite waits for the first.
        ``unbuilt``: its row table is created by the writer's first rows (:class:`RowWriter`); the caller
        then writes only through the writer and calls :meth:`RowWriter.build` before the transaction ends.
        ``copied_from``: the id of the file of another store this one copies (``store copy``), recorded in
        the same transaction (:data:`.catalog.vf_origin`).
        """
        info = self.new_table(conn, uuid.uuid4().hex, columns, build=not unbuilt)
        conn.execute(sa.insert(cat.virtual_file).values(id=info.id, table_name=info.table_name, generation=1))
        if copied_from is not None:
            conn.execute(sa.insert(cat.vf_origin).values(vf_id=info.id, copied_from=copied_from))
        self.catalogue_columns(conn, info)
        return RowWriter(conn, info, field, unbuilt=unbuilt)

    def create_from_batches(self, columns: Sequence[str], batches: Iterable[Sequence[Values]], *,
                            copied_from: str | None = None) -> str:
        """A new virtual file with ``columns`` holding every batch of value rows (aligned with ``columns``,
        consumed lazily: the database stores rows while the next batch is produced); returns its id.
        ``copied_from``: its origin (:meth:`new_file`)."""
        with self.create(columns, copied_from=copied_from) as writer:
            writer.write_batches(columns, batches)
        return writer.vf_id

    def create_from_dicts(self, batches: Iterable[Sequence[Mapping[str, str | None]]],
                          columns: Sequence[str] = (), field: str = "") -> str:
        """A new virtual file holding every batch of dict rows: ``columns`` first, then each new key as a
        column in the order it appears; returns its id."""
        with self.create(columns, field=field) as writer:
            for batch in batches:
                writer.write_dicts(batch)
        return writer.vf_id

    def append(self, rows_by_file: Mapping[str, Sequence[Mapping[str, str | None]]], field: str = "rows") -> int:
        """Append rows to one or several virtual files in one transaction; new keys add columns."""
        total = 0
        with self.writing() as conn:
            for vf_id, rows in rows_by_file.items():
                total += self._append_to(conn, vf_id, rows, field)
        return total

    def _append_to(self, conn: sa.Connection, vf_id: str, rows: Sequence[Mapping[str, str | None]],
                   field: str) -> int:
        """Append ``rows`` to one file. On PostgreSQL a value too long for the btree index a Query built on
        its column makes that index a hash index, and the rows go in again (:func:`hash_instead_of_btree`),
        in a savepoint so that the failed attempt leaves nothing."""
        def write() -> int:
            info = self.info(conn, vf_id, lock=True)
            writer = RowWriter(conn, info, field)
            with seq_floors.appending(conn, info):  # SQLite: past the numbers a Delete Rows took
                return sum(writer.write_dicts(batch) for batch in batched(rows, SCAN_BATCH))

        if conn.dialect.name != "postgresql":
            return write()
        while True:
            try:
                with conn.begin_nested():
                    return write()
            except Exception as exc:
                if not hash_instead_of_btree(conn, exc):
                    raise

    def publish(self, name: str, source: str) -> str:
        """``name`` takes over the row table of ``source`` (no row is copied); ``name``'s old table goes.

        Same transaction for the catalog and the DDL: a reader that started before the commit finishes on
        the old rows (PostgreSQL: the drop waits for it; SQLite: one writer at a time, readers on their
        snapshot), one that starts after reads the new ones. Iterations of ``name`` start over (new generation).
        """
        if not name or len(name) > 64:
            raise InvalidInput("name", "a virtual file name has 1 to 64 characters")
        if name == source:
            return name
        vf, col, cur = cat.virtual_file, cat.vf_column, cat.vf_cursor
        with self.writing(grows=False) as conn:  # the catalog's rows, and a drop
            new = self.info(conn, source, lock=True)
            try:
                old: VirtualFileInfo | None = self.info(conn, name, lock=True)
            except NotFound:
                old = None
            conn.execute(sa.delete(cur).where(cur.c.vf_id.in_([source, name])))
            conn.execute(sa.delete(col).where(col.c.vf_id == name))
            if old is None:
                conn.execute(sa.insert(vf).values(id=name, table_name=new.table_name, generation=1))
            else:
                conn.execute(sa.update(vf).where(vf.c.id == name).values(
                    table_name=new.table_name, generation=old.generation + 1, seq_floor=None))
            mark_written(conn, name)
            conn.execute(sa.update(col).where(col.c.vf_id == source).values(vf_id=name))
            conn.execute(sa.delete(vf).where(vf.c.id == source))
            if old is not None:
                drop_row_table(conn, old.table)
        return name

    def drop(self, vf_id: str) -> None:
        """Remove the virtual file and free its storage (``NotFound`` if it does not exist)."""
        with self.writing(grows=False) as conn:
            info = self.info(conn, vf_id, lock=True)
            _remove(conn, {vf_id: info.table_name})

    def drop_unchanged(self, listed: Sequence[tuple[str, datetime]]) -> list[str]:
        """Remove each listed file (``(id, created_at)`` as :meth:`inventory` listed it) that is still dated so;
        the ids gone: removed here, or meanwhile by someone else. A file written since the listing (dated
        anew: :func:`mark_written`) stays.

        Several files per transaction (:func:`drop_batch`): on SQLite a transaction that drops a table costs in
        proportion to the schema, one table per file (at 5,000 files 3.9 ms a file dropped one per transaction,
        0.5 ms in transactions of 200), so gc dropping one per transaction grew with the square of the files;
        on PostgreSQL each commit waits for a flush (≈ 20 ms a file).
        Each batch is whole or not at all: gc stopped midway leaves every file either there or gone."""
        gone: list[str] = []
        vf = cat.virtual_file
        for batch in batched(listed, drop_batch(self.engine.dialect.name)):
            dates = dict(batch)
            with self.writing(grows=False) as conn:
                query = sa.select(vf.c.id, vf.c.created_at, vf.c.table_name).where(vf.c.id.in_(dates)).order_by(vf.c.id)
                if conn.dialect.name == "postgresql":  # held until the commit: no write begins on them meanwhile
                    query = query.with_for_update()
                found = {row.id: row for row in conn.execute(query)}
                doomed = {vf_id: row.table_name for vf_id, row in found.items()
                          if as_utc(row.created_at) == dates[vf_id]}
                _remove(conn, doomed)
            gone += [vf_id for vf_id in dates if vf_id in doomed or vf_id not in found]
        return gone


#: files dropped per transaction by :meth:`Writing.drop_unchanged`. PostgreSQL locks each dropped table, its
#: primary key and its TOAST table and index (4 relations, more with a Query's indexes) until the commit, in
#: a lock table shared by every session (``max_locks_per_transaction``, 64 by default, times the
#: connections): 16 files keep a batch near one session's share. SQLite has no such table.
DROP_BATCH = {"postgresql": 16}
SQLITE_DROP_BATCH = 200


def drop_batch(dialect: str) -> int:
    """How many files one transaction of :meth:`Writing.drop_unchanged` drops on ``dialect``."""
    return DROP_BATCH.get(dialect, SQLITE_DROP_BATCH)


def _remove(conn: sa.Connection, tables: Mapping[str, str]) -> None:
    """Remove the files ``tables`` maps to their row tables (catalogued, locked by the caller): their
    cursors, columns, origins (``store copy``), entries and tables."""
    if not tables:
        return
    ids = sorted(tables)
    conn.execute(sa.delete(cat.vf_origin).where(cat.vf_origin.c.vf_id.in_(ids)))
    conn.execute(sa.delete(cat.vf_cursor).where(cat.vf_cursor.c.vf_id.in_(ids)))
    conn.execute(sa.delete(cat.vf_column).where(cat.vf_column.c.vf_id.in_(ids)))
    conn.execute(sa.delete(cat.virtual_file).where(cat.virtual_file.c.id.in_(ids)))
    quote = conn.dialect.identifier_preparer.quote_identifier
    for table_name in tables.values():
        conn.exec_driver_sql(f"DROP TABLE {quote(table_name)}")
    forget_tables(tables.values())  # this process's statements of them (:mod:`.table_caches`)
