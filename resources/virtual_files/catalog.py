"""The catalog tables and the shape of one virtual file's row table.

Design (research/etl.md §2, measured fastest): one table per virtual file, ``seq`` (row order) plus one
TEXT column per user column, internal names ``c0, c1, …``. User column names are data in
``cop_vf_column``; they never appear in SQL text, so quotes, dots, ``$``, keywords and any Unicode are
safe, and PostgreSQL's 63-byte identifier limit does not apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import sqlalchemy as sa

from connector_ops.resources.virtual_files.table_caches import TableCache

#: the id prefix of an asset's named virtual file (``asset:sales/orders``, :mod:`connector_ops.ops.asset_files`):
#: here, below the ops, for what must tell such a file from others without Dagster (``store copy`` skips them)
ASSET_FILE_PREFIX = "asset:"

metadata = sa.MetaData()

virtual_file = sa.Table(
    "cop_virtual_file",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("table_name", sa.String(64), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False, default=1),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    # SQLite (layout 3): the largest ``seq`` a Delete Rows took from the end of the row table, which the next
    # append numbers past (:mod:`.seq_floors`); NULL until then, and always on PostgreSQL (its sequence)
    sa.Column("seq_floor", sa.BigInteger, nullable=True),
)

vf_column = sa.Table(
    "cop_vf_column",
    metadata,
    sa.Column("vf_id", sa.String(64), sa.ForeignKey("cop_virtual_file.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("ordinal", sa.Integer, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("indexed", sa.Boolean, nullable=False, default=False),
)

vf_cursor = sa.Table(
    "cop_vf_cursor",
    metadata,
    sa.Column("vf_id", sa.String(64), sa.ForeignKey("cop_virtual_file.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("cursor_name", sa.String(200), primary_key=True),
    sa.Column("last_seq", sa.BigInteger, nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
)

#: which file of another store each copy ``connector-ops store copy`` made here copies (``copied_from``: its id
#: there), written in the copy's own transaction: a copy is here and named, or not here at all. A stop between
#: the copy's commit and its line in the command's map file left a copy nobody named, which the next run
#: copied again (:mod:`connector_ops.store_copy`). Removed with its file (:func:`.writing._remove`: gc, a drop);
#: a row an older release left behind when it removed the file names no file and is never read (``copies``
#: joins the catalog). No foreign key: creating one locks ``cop_virtual_file`` against every write (on
#: PostgreSQL ``SHARE ROW EXCLUSIVE``), so the first process of a release adding this table waited for every
#: write under way, and every writer queued behind it
vf_origin = sa.Table(
    "cop_vf_origin",
    metadata,
    sa.Column("vf_id", sa.String(64), primary_key=True),
    sa.Column("copied_from", sa.String(64), nullable=False),
)

array_cursor = sa.Table(
    "cop_array_cursor",
    metadata,
    sa.Column("digest", sa.String(64), primary_key=True),
    sa.Column("position", sa.BigInteger, nullable=False),
    # when the position last moved (layout 2; the upgrade dates older positions by itself): gc removes one
    # not moved since its cutoff. Nullable, as SQLite adds a column to a table only so; both writers set it
    sa.Column("moved_at", sa.DateTime(timezone=True), nullable=True),
)

#: Dagster step outputs (:mod:`.step_outputs`): in the store's database, so every host running steps reads them.
step_output = sa.Table(
    "cop_step_output",
    metadata,
    sa.Column("key", sa.String(1000), primary_key=True),
    sa.Column("run_id", sa.String(64), nullable=False, index=True),
    sa.Column("value", sa.LargeBinary, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)

#: platform files kept in the database (``CONNECTOR_OPS_FILES_BACKEND=database``, :mod:`..platform_file_db`)
platform_file = sa.Table(
    "cop_platform_file",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("descriptor", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
)

platform_file_chunk = sa.Table(
    "cop_platform_file_chunk",
    metadata,
    sa.Column("file_id", sa.String(64), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
)

#: which layout of these tables the store holds (one row, ``id`` 1): :mod:`.layout`
store_layout = sa.Table(
    "cop_store_layout",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("written_by", sa.String(64), nullable=False),
)


def write_ended(conn: sa.Connection) -> sa.ColumnElement:
    """The time at which a write transaction's last statement runs, as ``created_at`` dates what it wrote.

    ``connector-ops gc`` keeps what was written after its cutoff: a file dated when its write began (what
    PostgreSQL's ``now()`` says all transaction long) would be old the instant a long write commits.
    SQLite's ``CURRENT_TIMESTAMP`` is the statement's own time already."""
    return sa.func.clock_timestamp() if conn.dialect.name == "postgresql" else sa.func.now()


SEQ_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite: INTEGER PRIMARY KEY = rowid


def internal_name(ordinal: int) -> str:
    return f"c{ordinal}"


def row_table(table_name: str, ordinals: Sequence[int]) -> sa.Table:
    """The SQLAlchemy description of a row table (built from the catalog, never reflected).

    Cached: a table name is never reused and its columns are fixed by the ordinals, and building a
    ``Table`` costs more than an indexed query (it also lets compiled statements be reused).
    """
    key = (table_name, tuple(ordinals))
    return _row_table.get_or_build(key, lambda: _build_row_table(*key), (table_name,))


#: the ``Table`` of each row table (and column set) in use; a dropped table's go with it (:mod:`.table_caches`)
_row_table: TableCache[tuple[str, tuple[int, ...]], sa.Table] = TableCache(256)


def _build_row_table(table_name: str, ordinals: tuple[int, ...]) -> sa.Table:
    return sa.Table(
        table_name,
        sa.MetaData(),
        sa.Column("seq", SEQ_TYPE, primary_key=True, autoincrement=True),
        *(sa.Column(internal_name(o), sa.Text) for o in ordinals),
    )


@dataclass(frozen=True)
class VirtualFileInfo:
    """One virtual file as the catalog describes it."""

    id: str
    table_name: str
    generation: int
    names: tuple[str, ...]  # user column names, in order
    ordinals: tuple[int, ...]
    indexed: frozenset[int]

    @cached_property
    def table(self) -> sa.Table:
        return row_table(self.table_name, self.ordinals)

    def column_map(self, table: sa.FromClause | None = None) -> dict[str, sa.ColumnElement]:
        """User column name -> SQL column (what the filter compiler and joins work with); ``table``: the row
        table or a from-clause with its columns (an alias of it, as a join names its sides)."""
        table = self.table if table is None else table
        return {n: table.c[internal_name(o)] for n, o in zip(self.names, self.ordinals, strict=True)}

    def ordinal_of(self, name: str) -> int | None:
        try:
            return self.ordinals[self.names.index(name)]
        except ValueError:
            return None
