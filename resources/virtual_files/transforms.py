"""Whole transforms of virtual files, each one transaction: map rows, split rows (Validate), join.

The store reads the source by keyset pages inside the transaction that writes the result and hands
rows (dicts, missing values left out) to the action's code; the action decides what becomes of each
row and never sees a connection. Anything the action's code raises rolls the whole transform back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

import sqlalchemy as sa

from connector_ops.resources.virtual_files.fetching import stream
from connector_ops.resources.virtual_files.joins import join_into
from connector_ops.resources.virtual_files.loaders import insert_batches
from connector_ops.resources.virtual_files.querying import Querying
from connector_ops.resources.virtual_files.rows import keyset_pages, row_of
from connector_ops.resources.virtual_files.shapes import SCAN_BATCH, JoinKind, PageFunction, Refusal, RuleShape, Side
from connector_ops.resources.virtual_files.suspect_sql import may_fail
from connector_ops.resources.virtual_files.writing import RowWriter, Writing


class Transforms(Writing, Querying):
    """Map, split and join: a new virtual file (or a replaced one) from one or two others."""

    def map_rows(self, vf_id: str, transform: PageFunction, *, overwrite: bool = False,
                 batch_size: int | None = None) -> str:
        """Write ``transform(page)`` for every page of rows into a new virtual file, or in place of ``vf_id``
        (same id, new generation); returns its id. Columns grow in the order new keys appear."""
        with self.create(replace=vf_id if overwrite else None) as writer:
            source = writer.replaced if overwrite else self.info(writer.conn, vf_id)
            assert source is not None
            names = source.names
            for page in keyset_pages(writer.conn, source, names, batch_size or SCAN_BATCH):
                _write_rows(writer, transform([row_of(names, values) for values in page]))
        return writer.vf_id

    def split_rows(self, vf_id: str, refuse: Refusal, refused_columns: Sequence[str],
                   batch_size: int | None = None, rules: Sequence[RuleShape] | None = None) -> tuple[str, str]:
        """Two new virtual files: the rows ``refuse`` accepts (the source's columns, values unchanged, in
        the source's order) and, for each other row, what ``refuse`` returned (``refused_columns``); their ids.

        With ``rules`` (Validate's column rules), the database clears the rows that surely pass
        (:mod:`.suspect_sql`) and copies them to the accepted file in one ``INSERT … SELECT``; only the
        other rows are read and handed to ``refuse``. Accepted rows keep their source ``seq``, so the order
        holds whichever way a row went.
        """
        with self.writing() as conn:
            source = self.info(conn, vf_id)
            names = source.names
            accepted = self.new_file(conn, names)
            refused = self.new_file(conn, refused_columns)
            table, columns = source.table, source.column_map()
            target = self.info(conn, accepted.vf_id)
            into = [target.table.c.seq, *(target.column_map()[n] for n in names)]
            rows = sa.select(table.c.seq, *(columns[n] for n in names))
            flags = None
            if rules is not None:  # the condition once per row: the flagged seqs, then two joins on them
                flags = sa.Table(f"flagged_{uuid.uuid4().hex}", sa.MetaData(), sa.Column("seq", sa.BigInteger,
                                 primary_key=True, autoincrement=False), prefixes=["TEMPORARY"])
                flags.create(conn)
                conn.execute(sa.insert(flags).from_select(
                    ["seq"], sa.select(table.c.seq).where(may_fail(rules, columns, conn.dialect.name))))
                cleared = ~sa.exists(sa.select(flags.c.seq).where(flags.c.seq == table.c.seq))
                conn.execute(sa.insert(target.table).from_select(into, rows.where(cleared)))
                rows = rows.join_from(table, flags, flags.c.seq == table.c.seq)
            query = rows.order_by(table.c.seq)
            seq_and_columns = ["seq", *(c.name for c in into[1:])]
            as_text = str if conn.dialect.name == "postgresql" else int  # COPY's text format takes strings
            for page in stream(conn, query, batch_size or SCAN_BATCH):
                good, bad = [], []
                for seq, *values in page:
                    verdict = refuse(row_of(names, values))
                    if verdict is None:
                        good.append((as_text(seq), *values))
                    else:
                        bad.append(verdict)
                if good:
                    insert_batches(conn, target.table_name, seq_and_columns, [good])
                refused.write_tuples(refused_columns, bad)
            if flags is not None:
                flags.drop(conn)
            if conn.dialect.name == "postgresql":  # rows came with their seq: the next append numbers after them
                after = sa.select(sa.func.coalesce(sa.func.max(target.table.c.seq), 0) + 1).scalar_subquery()
                conn.execute(sa.select(sa.func.setval(sa.func.pg_get_serial_sequence(target.table_name, "seq"),
                                                      after, False)))
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


def _write_rows(writer: RowWriter, rows: Iterable[Mapping[str, str | None]]) -> None:
    """Rows as tuples of the writer's columns; before a row with new keys, the rows so far are written
    and the columns added (a plain dict of strings with known keys is the hot path)."""
    out: list[tuple[str | None, ...]] = []
    known = set(writer.names)
    for row in rows:
        if not row.keys() <= known:
            if out:
                writer.write_tuples(writer.names, out)
                out = []
            writer.ensure_columns(row)
            known = set(writer.names)
        out.append(tuple(map(row.get, writer.names)))
    if out:
        writer.write_tuples(writer.names, out)
