"""Join two virtual files in SQL (``INSERT … SELECT … JOIN``) into an output and a rejection file.

Semantics (research/etl.md §5): a row matches when the key values are equal strings; a missing or
empty key never matches; duplicate keys fan out like SQL (m × n rows). Output rows are ordered by the
left row, then the right row. The rejection file holds every left row without a partner exactly once,
with the left columns unchanged, for INNER and LEFT alike (for LEFT those rows are also in the output,
with the right columns missing). Both files are written in one transaction: all or nothing.

Right rows without a partner are not reported. SQLite has no hash join, so the right key is indexed
first (once per virtual file, kept for later joins and queries); PostgreSQL hash-joins without one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa

from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import name_problem, unknown_columns
from connector_ops.resources.virtual_files.catalog import VirtualFileInfo, internal_name, row_table
from connector_ops.resources.virtual_files.keys_after import (
    analyzed,
    filled,
    keys_built_after,
    numbered_after_rows,
)
from connector_ops.resources.virtual_files.shapes import JoinKind, Side

if TYPE_CHECKING:
    from connector_ops.resources.virtual_files.writing import RowWriter


def join_into(conn: sa.Connection, left: Side, left_info: VirtualFileInfo, right: Side, right_info: VirtualFileInfo,
              kind: JoinKind, output_schema: Mapping[str, str] | None,
              new_file: Callable[[list[str]], RowWriter]) -> tuple[RowWriter, RowWriter]:
    """Join ``left`` with ``right`` inside ``conn``'s transaction into two files made by ``new_file``:
    ``(output, rejection)``."""
    l_table, r_table = left_info.table.alias("l"), right_info.table.alias("r")
    l_cols, r_cols = left_info.column_map(l_table), right_info.column_map(r_table)
    l_key = _key(l_cols, left, "join.left.key", left_info)
    r_key = _key(r_cols, right, "join.right.key", right_info)
    if output_schema:
        columns = _schema_columns(output_schema, {left.custom_id: l_cols, right.custom_id: r_cols})
    else:
        columns = _default_columns(left, l_cols, right, r_cols)

    analyzed(conn, [left_info.table_name, right_info.table_name])
    matches = sa.and_(l_key == r_key, l_key != "")
    joined = l_table.join(r_table, matches, isouter=kind == "LEFT")
    output = new_file([name for name, _ in columns])
    _write(conn, output, [expr for _, expr in columns], joined, None, (l_table.c.seq, r_table.c.seq),
           seq=_pair_seq(conn, left_info, right_info, l_table.c.seq, r_table.c.seq))

    rejection = new_file(list(left_info.names))
    # NOT EXISTS alone, the left key's test inside it: PostgreSQL makes that an anti-join (hashed, spilling
    # to disk if it must). Under an AND it ran a subplan per left row, one scan of the right file each
    # once its keys outgrew work_mem: a 4M × 400k Join did not end in 5 minutes.
    unmatched = sa.not_(sa.exists().where(r_key == l_key, l_key != ""))
    _write(conn, rejection, list(l_cols.values()), l_table, unmatched, (l_table.c.seq,), seq=l_table.c.seq)
    return output, rejection


def _pair_seq(conn: sa.Connection, left_info: VirtualFileInfo, right_info: VirtualFileInfo,
              l_seq: sa.ColumnElement, r_seq: sa.ColumnElement) -> sa.ColumnElement | None:
    """PostgreSQL: each output row's ``seq`` as ``l.seq × (the right file's largest seq + 1) + r.seq``,
    unique and in (left row, right row) order without numbering the rows: a ``row_number()`` window sorts
    every output row first (on disk past work_mem) and keeps the statement off parallel workers (1M × 100k:
    0.42 s → 0.30 s). The largest seq is read by the statement itself, in its own snapshot. ``None``
    (number the rows) where the product could leave ``bigint``; SQLite numbers rows itself."""
    if conn.dialect.name != "postgresql":
        return None
    left_top, right_top = (_top(info) for info in (left_info, right_info))
    left_width, right_width = conn.execute(sa.select(left_top, right_top)).one()
    if left_width * right_width > 2 ** 62:  # room for the files to grow meanwhile
        return None
    return l_seq * right_top + sa.func.coalesce(r_seq, 0)  # LEFT: a left row without partner has one output row


def _top(info: VirtualFileInfo) -> sa.ScalarSelect:
    """The file's largest ``seq`` + 1, as a value of the statement it is part of."""
    return sa.select(sa.func.coalesce(sa.func.max(info.table.c.seq), 0) + 1).correlate(None).scalar_subquery()


def _key(columns: Mapping[str, sa.ColumnElement], side: Side, field: str,
         info: VirtualFileInfo) -> sa.ColumnElement:
    if side.key not in columns:
        raise InvalidInput(field, unknown_columns([side.key], info.names, side.custom_id))
    return columns[side.key]


def _schema_columns(schema: Mapping[str, str], sides: Mapping[str, Mapping[str, sa.ColumnElement]]
                    ) -> list[tuple[str, sa.ColumnElement]]:
    """``{"out": "customId.column"}`` resolved in order; the customId ends at the first dot."""
    columns = []
    for name, reference in schema.items():
        if (problem := name_problem(name)) is not None:
            raise InvalidInput("outputSchema", f"an output column's name {problem}")
        custom_id, dot, column = reference.partition(".")
        if not dot or custom_id not in sides:
            raise InvalidInput(f"outputSchema.{name}", f"{reference!r} must be '<customId>.<column>' with customId "
                                                       f"{' or '.join(repr(s) for s in sides)}")
        if column not in sides[custom_id]:
            raise InvalidInput(f"outputSchema.{name}", unknown_columns([column], list(sides[custom_id]),
                                                                       repr(custom_id)))
        columns.append((name, sides[custom_id][column]))
    return columns


def _default_columns(left: Side, l_cols: Mapping[str, sa.ColumnElement], right: Side,
                     r_cols: Mapping[str, sa.ColumnElement]) -> list[tuple[str, sa.ColumnElement]]:
    """Every left column, then every right column; a name on both sides gets ``_<customId>`` on each."""
    common = set(l_cols) & set(r_cols)
    columns = [(f"{n}_{left.custom_id}" if n in common else n, c) for n, c in l_cols.items()]
    columns += [(f"{n}_{right.custom_id}" if n in common else n, c) for n, c in r_cols.items()]
    names = [n for n, _ in columns]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise InvalidInput("outputSchema", f"the default output names collide ({clashes}); give an outputSchema")
    return columns


def _write(conn: sa.Connection, writer: RowWriter, values: Sequence[sa.ColumnElement], source: sa.FromClause,
           where: sa.ColumnElement | None, order: Sequence[sa.ColumnElement],
           seq: sa.ColumnElement | None = None) -> None:
    """The rows of ``values`` from ``source`` (``where``) into the new file of ``writer``, numbered in
    ``order``. PostgreSQL: a parallel ``CREATE TABLE … AS`` (:func:`.keys_after.filled`), each row bringing
    its ``seq`` (``seq``, any values that keep that order, or else its rank in ``order``). SQLite numbers the rows
    it appends itself, fastest (a given rowid costs a seek per row)."""
    table = row_table(writer.table_name, writer.ordinals)
    rows = sa.select(*values).select_from(source)
    if where is not None:
        rows = rows.where(where)
    if conn.dialect.name != "postgresql":
        target = [table.c[internal_name(o)] for o in writer.ordinals]  # never empty: a key column exists
        conn.execute(sa.insert(table).from_select(target, rows.order_by(*order)))
        return
    numbered = rows.with_only_columns(seq if seq is not None else sa.func.row_number().over(order_by=order),
                                      *values, maintain_column_froms=True)
    with keys_built_after(conn, [writer.table_name]):
        filled(conn, table, numbered)
    numbered_after_rows(conn, [table])
