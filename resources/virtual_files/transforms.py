"""Whole transforms of virtual files, each one transaction: map rows, split rows (Validate), join.

The store reads the source by keyset pages as the transaction that writes the result sees it (on
PostgreSQL a Map reads through a second connection on that transaction's snapshot, see
:meth:`~.core.StoreCore.reading_beside`) and hands rows (dicts, missing values left out) to the action's
code; the action decides what becomes of each row and never sees a connection. Anything the action's code
raises rolls the whole transform back.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import uuid
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from connector_ops.kernel.scoped import rows_per_page
from connector_ops.resources.virtual_files.catalog import VirtualFileInfo
from connector_ops.resources.virtual_files.engines import room_to_hash_keys
from connector_ops.resources.virtual_files.fetching import stream
from connector_ops.resources.virtual_files.joins import join_into
from connector_ops.resources.virtual_files.keys_after import (
    analyzed,
    filled,
    keys_built_after,
    numbered_after_rows,
)
from connector_ops.resources.virtual_files.loaders import insert_batches
from connector_ops.resources.virtual_files.querying import Querying
from connector_ops.resources.virtual_files.refusal_sql import content_json, error_text
from connector_ops.resources.virtual_files.rows import as_dicts, keyset_pages, row_of
from connector_ops.resources.virtual_files.shapes import (
    SCAN_BATCH,
    JoinKind,
    PageFunction,
    Refusal,
    Side,
    Values,
    Verdicts,
)
from connector_ops.resources.virtual_files.suspect_sql import may_fail
from connector_ops.resources.virtual_files.table_caches import drop_row_table
from connector_ops.resources.virtual_files.writing import RowWriter, Writing

#: PostgreSQL: rows a Map hands to its function, and then to ``COPY``, at a time (≈ 100 KB), so that the
#: server stores one slice while the function runs on the next. With whole 10,000-row pages and a ``COPY``
#: per page the two took turns (1M rows: 0.74–0.78× the raw loop, against 1.05×).
MAP_SLICE = 1_000


class Transforms(Writing, Querying):
    """Map, split and join: a new virtual file (or a replaced one) from one or two others."""

    def map_rows(self, vf_id: str, transform: PageFunction, *, overwrite: bool = False,
                 batch_size: int | None = None) -> str:
        """Write ``transform(page)`` for every page of rows into a new virtual file, or in place of ``vf_id``
        (same id, new generation); returns its id. Columns grow in the order new keys appear. A page holds
        ``batch_size`` rows, fewer of a wide file (:func:`~connector_ops.kernel.scoped.rows_per_page`)."""
        with self.create(replace=vf_id if overwrite else None, field="action") as writer:
            source = writer.replaced if overwrite else self.info(writer.conn, vf_id)
            assert source is not None
            names = source.names
            batch_size = rows_per_page(len(names), batch_size or SCAN_BATCH)
            # both closed before ``create`` drops a replaced table, also when ``transform`` raises: a failed
            # Map's traceback keeps its frames, and with them a cursor still open on a pooled connection
            with (self.reading_beside(writer.conn) as reader,
                  contextlib.closing(keyset_pages(reader, source, names, batch_size)) as pages):
                if reader is not writer.conn:  # the server stores a slice while the function runs on the next
                    pages = _sliced(pages, rows_per_page(len(names), MAP_SLICE))
                _write_pages(writer, _mapped(pages, names, transform))
        return writer.vf_id

    def split_rows(self, vf_id: str, refuse: Refusal, refused_columns: Sequence[str],
                   batch_size: int | None = None, verdicts: Verdicts | None = None) -> tuple[str, str]:
        """Two new virtual files: the rows ``refuse`` accepts (the source's columns, values unchanged) and, for
        each other row, what ``refuse`` returned (``refused_columns``); their ids. Both keep each row's
        source ``seq``, so the order holds whichever way a row went and whoever decided it.

        With ``verdicts`` (Validate's rules and words), the database decides (:func:`_decide`): the rows that
        may fail (:mod:`.suspect_sql`) are worded (:mod:`.refusal_sql`) straight into the refused file, and
        the rest copied to the accepted file, each by one ``INSERT … SELECT``. Only the rows SQL cannot
        judge surely are read and handed to ``refuse``.
        """
        with self.writing() as conn:
            source = self.info(conn, vf_id)
            names = source.names
            accepted = self.new_file(conn, names)
            refused = self.new_file(conn, refused_columns)
            table, columns = source.table, source.column_map()
            targets = [self.info(conn, f.vf_id) for f in (accepted, refused)]
            into = [[t.table.c.seq, *(t.column_map()[n] for n in cols)]
                    for t, cols in zip(targets, (names, refused_columns), strict=True)]
            with keys_built_after(conn, [t.table_name for t in targets]):  # PostgreSQL: one sort each
                rows = sa.select(table.c.seq, *(columns[n] for n in names))
                if verdicts is None:
                    _refuse_in_python(conn, rows, names, refuse, targets, into, batch_size)
                else:
                    undecided = _decide(conn, table, columns, names, verdicts, targets, into)
                    if undecided is not None:
                        _refuse_in_python(conn, rows.join_from(table, undecided, undecided.c.seq == table.c.seq),
                                          names, refuse, targets, into, batch_size)
                        drop_row_table(conn, undecided)
            numbered_after_rows(conn, [t.table for t in targets])
        return accepted.vf_id, refused.vf_id

    def join(self, left: Side, right: Side, kind: JoinKind = "INNER",
             output_schema: Mapping[str, str] | None = None) -> tuple[str, str]:
        """Join ``left`` with ``right`` (see :mod:`.joins`); returns ``(output id, rejection id)``."""
        if self.dialect == "sqlite":  # no hash join: index the right key once
            self.ensure_indexes(right.virtual_file_id, [right.key])
        with self.writing() as conn:
            left_info = self.info(conn, left.virtual_file_id)
            right_info = self.info(conn, right.virtual_file_id)
            output, rejection = join_into(conn, left, left_info, right, right_info, kind, output_schema,
                                          lambda names: self.new_file(conn, names))
        return output.vf_id, rejection.vf_id


def _mapped(pages: Iterable[list[tuple]], names: Sequence[str],
            transform: PageFunction) -> Iterator[Sequence[Mapping[str, str | None]]]:
    """``transform`` of each page's rows (dicts); a page and its dicts are let go before the next page is
    fetched (see :func:`.loaders.insert_batches`)."""
    for page in pages:
        rows = as_dicts(names, page)
        del page
        out = transform(rows)
        del rows
        yield out
        del out


def _sliced(pages: Iterable[list[tuple]], size: int) -> Generator[list[tuple], None, None]:
    """The rows of ``pages`` in pages of at most ``size``."""
    for page in pages:
        for start in range(0, len(page), size):
            yield page[start:start + size]


def _write_pages(writer: RowWriter, pages: Iterable[Sequence[Mapping[str, str | None]]]) -> None:
    """Pages of rows (dicts) as tuples of the writer's columns, consumed lazily through one
    ``write_batches`` (one ``COPY``) for as long as the rows bring no new keys. At a row that does, that
    stream ends, the new keys of the rest of its page are added at once (in the order they appear), and the
    next stream starts with that row."""
    pages = iter(pages)
    while True:
        held: list[Sequence[Mapping[str, str | None]]] = []
        writer.write_batches(writer.names, _known_rows(pages, list(writer.names), held))
        if not held:
            return
        writer.ensure_columns(key for row in held[0] for key in row)  # the page's new keys together
        pages = itertools.chain(held, pages)


def _known_rows(pages: Iterator[Sequence[Mapping[str, str | None]]], names: list[str],
                held: list[Sequence[Mapping[str, str | None]]]) -> Iterator[list[Values]]:
    """Each page's rows as tuples aligned with ``names`` (a missing key is a missing value), until a row has a
    key ``names`` lacks: the rest of its page, from that row, goes into ``held``. A page whose rows all have
    exactly the keys ``names`` (what a row function usually returns) is aligned in C, with no step per row
    in Python: 10k rows × 8 columns 5.4 → 2.3 ms."""
    known = set(names)
    aligned = operator.itemgetter(*names) if len(names) > 1 else None  # of one name it gives no tuple
    for page in pages:
        if aligned is not None and all(map(known.issuperset, page)) and set(map(len, page)) <= {len(names)}:
            out = list(map(aligned, page))
        else:
            out = []
            for row in page:
                if not row.keys() <= known:
                    held.append(page[len(out):])
                    break
                out.append(tuple(map(row.get, names)))
        del page  # the page's dicts go before the next page is built (see loaders.insert_batches)
        if out:
            yield out
        del out
        if held:
            return


def _refuse_in_python(conn: sa.Connection, rows: sa.Select, names: Sequence[str], refuse: Refusal,
                      targets: Sequence[VirtualFileInfo], into: Sequence[Sequence[Any]],
                      batch_size: int | None) -> None:
    """Hand each of ``rows`` (``seq`` and the values of ``names``) to ``refuse`` and write it, with its
    ``seq``, to the accepted file or its verdict to the refused file, a page at a time."""
    as_text = str if conn.dialect.name == "postgresql" else int  # COPY's text format takes strings
    for page in stream(conn, rows.order_by(rows.selected_columns[0]), batch_size or SCAN_BATCH):
        decided: tuple[list, list] = ([], [])
        for seq, *values in page:
            verdict = refuse(row_of(names, values))
            decided[verdict is not None].append((as_text(seq), *(values if verdict is None else verdict)))
        for target, cols, batch in zip(targets, into, decided, strict=True):
            if batch:
                insert_batches(conn, target.table_name, [c.name for c in cols], [batch])


def _decide(conn: sa.Connection, table: sa.Table, columns: Mapping[str, Any], names: Sequence[str],
            verdicts: Verdicts, targets: Sequence[VirtualFileInfo], into: Sequence[Sequence[Any]]
            ) -> sa.Table | None:
    """Split in SQL; returns a temporary table of the ``seq`` of the rows SQL could not judge surely
    (``None`` when there are none).

    One pass writes every flagged row to the refused file with its error and content (the condition, the
    words and the JSON evaluated once per row, no join); the rows whose error came out '' (no rule failed
    after all) are taken out again, the accepted file gets every row the refused file does not hold, and
    the rows whose error is NULL (undecided) move from the refused file to the returned table. Usually
    there are neither, and one look for them replaces the three passes over the refused file that move
    them (1M rows, 375k refused, on SQLite: 0.18 s). On PostgreSQL both files are made by a parallel
    ``CREATE TABLE … AS`` (:func:`.keys_after.filled`)."""
    accepted, refused = (t.table for t in targets)
    dialect = conn.dialect.name
    if dialect == "postgresql":  # the anti-join's hash of ``seq`` fits in memory instead of spilling
        room_to_hash_keys(conn)
    error = into[1][1]
    filled(conn, refused, sa.select(table.c.seq, error_text(verdicts, columns, dialect),
                                    content_json(names, columns, dialect))
           .where(may_fail(verdicts.rules, columns, dialect)))
    unsettled = conn.execute(sa.select(sa.exists().where(sa.or_(error.is_(None), error == "")))).scalar()
    if unsettled:
        conn.execute(sa.delete(refused).where(error == ""))
    analyzed(conn, [refused.name])  # its size known, the anti-join hashes it and not the source
    held = sa.exists(sa.select(refused.c.seq).where(refused.c.seq == table.c.seq))
    filled(conn, accepted, sa.select(table.c.seq, *(columns[n] for n in names)).where(~held))
    if not unsettled:
        return None
    undecided = sa.Table(f"undecided_{uuid.uuid4().hex}", sa.MetaData(),
                         sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"),  # SQLite: the rowid
                                   primary_key=True, autoincrement=False), prefixes=["TEMPORARY"])
    undecided.create(conn)
    conn.execute(sa.insert(undecided).from_select(["seq"], sa.select(refused.c.seq).where(error.is_(None))))
    conn.execute(sa.delete(refused).where(error.is_(None)))
    return undecided
