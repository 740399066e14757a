"""PostgreSQL: a new row table filled in bulk — its primary key built after its rows, in one sorted pass,
and (:func:`filled`) its rows computed by parallel workers.

Each row inserted into a table with a primary key also inserts an entry into its ``seq`` index; for a new
file that gets hundreds of thousands of rows in one statement, dropping the key first and adding it back
after the rows are in is one sort instead: 1.7 s instead of 2.3 s for the Join benchmark's 900k-row
rejection file. The tables are new in this transaction, so no one else sees them meanwhile, and each ends
with the same constraint (same name) as any other row table; a duplicate ``seq`` fails the ``ADD``, and the
transaction with it. SQLite: nothing to do (``seq`` is its rowid, the table itself).

PostgreSQL runs an ``INSERT … SELECT`` in one process, but the ``SELECT`` of a ``CREATE TABLE … AS`` with
parallel workers, and rows that bring their ``seq`` need neither a sort nor the sequence. On 2 cores:
Validate's refused file at 1M rows (every row worded in SQL) 3.7 s → 1.9 s; Join's 900k-row rejection
file 1.5 s → 0.7 s. So :func:`filled` makes the new table again that way, under the same name, and gives
it back what ``CREATE TABLE`` had given it: ``seq`` not null, drawn from its own sequence, which
:func:`numbered_after_rows` moves past the rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa


@contextlib.contextmanager
def keys_built_after(conn: sa.Connection, table_names: Sequence[str]) -> Iterator[None]:
    """Within the block, the new tables ``table_names`` take rows without maintaining their primary key."""
    if conn.dialect.name != "postgresql":
        yield
        return
    quote = conn.dialect.identifier_preparer.quote
    keys = {}
    for name in table_names:
        keys[name] = conn.execute(sa.text("SELECT conname FROM pg_constraint WHERE conrelid = CAST(:t AS regclass) "
                                          "AND contype = 'p'"), {"t": quote(name)}).scalar_one()
        conn.exec_driver_sql(f"ALTER TABLE {quote(name)} DROP CONSTRAINT {quote(keys[name])}")
    yield
    for name, key in keys.items():
        conn.exec_driver_sql(f"ALTER TABLE {quote(name)} ADD CONSTRAINT {quote(key)} PRIMARY KEY (seq)")


#: values of ``seq`` a bulk load's session takes from the sequence at a time (:func:`numbered_in_bulk`)
BULK_CACHE = 8192


@contextlib.contextmanager
def numbered_in_bulk(conn: sa.Connection, table_name: str) -> Iterator[None]:
    """Within the block, the new table's rows draw ``seq`` from its sequence ``BULK_CACHE`` values at a
    time instead of one: a ``COPY`` of 1M rows 1.43 s → 1.25 s. The table is new in this transaction, so
    only this session numbers its rows meanwhile, in the order they come. After the block the sequence
    hands out one value at a time again (``ALTER SEQUENCE`` also drops what this session still holds,
    which it would hand out after other sessions' later rows), from just after the rows."""
    if conn.dialect.name != "postgresql":
        yield
        return
    sequence = conn.execute(sa.select(sa.func.pg_get_serial_sequence(
        conn.dialect.identifier_preparer.quote(table_name), "seq"))).scalar_one()
    conn.exec_driver_sql(f"ALTER SEQUENCE {sequence} CACHE {BULK_CACHE}")
    yield
    conn.exec_driver_sql(f"ALTER SEQUENCE {sequence} CACHE 1")
    _numbered_after(conn, table_name, sequence)


def filled(conn: sa.Connection, table: sa.Table, select: sa.Select) -> None:
    """Fill the new, empty row ``table`` with the rows of ``select``, whose columns are the table's columns
    in order (``seq`` first, given). Call it inside :func:`keys_built_after` for this table: on PostgreSQL
    the table is made again by a parallel ``CREATE TABLE … AS`` and gets its key where that block ends."""
    if conn.dialect.name != "postgresql":
        _sqlite_insert(conn, sa.insert(table).from_select(list(table.c), select))
        return
    quote = conn.dialect.identifier_preparer.quote
    name = quote(table.name)
    if conn.execute(sa.text("SELECT count(*) FROM pg_constraint WHERE conrelid = CAST(:t AS regclass) "
                            "AND contype = 'p'"), {"t": name}).scalar_one():
        raise RuntimeError(f"filled({table.name}) outside keys_built_after: its primary key would be lost")
    sequence = conn.execute(sa.select(sa.func.pg_get_serial_sequence(name, "seq"))).scalar_one()
    typed = (sa.cast(c, t.type).label(t.name) for c, t in zip(select.selected_columns, table.c, strict=True))
    labelled = select.with_only_columns(*typed, maintain_column_froms=True)
    compiled = labelled.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    conn.exec_driver_sql(f"DROP TABLE {name}")  # its sequence goes with it
    # the leader writes the rows while the workers find them: at the default (0.1) the planner priced
    # handing rows over so high that it kept Join's 900k-row anti-join in one process (0.99 s → 0.84 s)
    conn.exec_driver_sql("SET LOCAL parallel_tuple_cost = 0.01")
    conn.exec_driver_sql(f"CREATE TABLE {name} AS {compiled}", compiled.params)
    conn.exec_driver_sql(f"CREATE SEQUENCE {sequence} OWNED BY {name}.seq")
    conn.exec_driver_sql(f"ALTER TABLE {name} ALTER seq SET NOT NULL, "
                         f"ALTER seq SET DEFAULT nextval('{sequence}'::regclass)")


#: bound parameters past which :func:`_sqlite_insert` writes the values into the statement instead
SQLITE_INLINE_PARAMETERS = 2000


def _sqlite_insert(conn: sa.Connection, insert: sa.Insert) -> None:
    """SQLite: run ``insert``, with its values written into its text when it has many. SQLite prepares each
    bound parameter as a constant it compares with every constant kept before (n²): Validate of a file of
    1,599 columns with a rule on each (86k parameters: the checks' words, lengths and patterns) took 225 s to
    prepare for two rows, 0.6 s with the values written in. Those are text and numbers of our own (rule
    words, column names, bounds), which SQLAlchemy quotes; a statement of a usual size stays compiled once."""
    compiled = insert.compile(dialect=conn.dialect)
    if len(compiled.params) <= SQLITE_INLINE_PARAMETERS:
        conn.execute(insert)
        return
    inline = insert.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
    conn.exec_driver_sql(str(inline))


def numbered_after_rows(conn: sa.Connection, tables: Sequence[sa.Table]) -> None:
    """New row tables whose rows came with their ``seq`` (a source's): the next append numbers after them.
    PostgreSQL's sequence has not moved; SQLite's rowid follows the largest by itself."""
    if conn.dialect.name != "postgresql":
        return
    quote = conn.dialect.identifier_preparer.quote
    for table in tables:
        _numbered_after(conn, table.name, sa.func.pg_get_serial_sequence(quote(table.name), "seq"))


def _numbered_after(conn: sa.Connection, table_name: str, sequence: Any) -> None:
    """The table's sequence moved to just after its largest ``seq``."""
    table = sa.table(table_name, sa.column("seq"))
    after = sa.select(sa.func.coalesce(sa.func.max(table.c.seq), 0) + 1).scalar_subquery()
    conn.execute(sa.select(sa.func.setval(sequence, after, False)))


def analyzed(conn: sa.Connection, table_names: Sequence[str]) -> None:
    """PostgreSQL: gather statistics on those of the tables that never had any (a file just loaded or
    made in this transaction), so the planner joins them as they are: without them it guessed the Join
    benchmark's 100k-row right file at a sixth of its size and sorted 1M left rows for a merge join
    (1.16 s) instead of hashing the right file (0.69 s). A small sample is enough for that: the default
    one took 0.27 s on the 1M-row left file.

    "Never had any" is judged by the columns' statistics (``pg_stats``), not by the table's size
    (``reltuples``): a load whose primary key is built after its rows (:func:`keys_built_after`) has its size
    counted by that build but nothing known of its values. Judged by size, pushed files passed for analyzed
    and the planner merge-joined them again (Join's output 0.48 s, against 0.29 s analyzed, at 1M × 100k)."""
    if conn.dialect.name != "postgresql":
        return
    quote = conn.dialect.identifier_preparer.quote
    never = conn.execute(sa.text("SELECT relname FROM pg_class c WHERE relname IN :names AND relkind = 'r' "
                                 "AND NOT EXISTS (SELECT FROM pg_stats s WHERE s.tablename = c.relname)")
                         .bindparams(sa.bindparam("names", expanding=True)), {"names": list(table_names)}
                         ).scalars().all()
    if never:
        conn.exec_driver_sql("SET LOCAL default_statistics_target = 10")  # a sample of 3,000 rows: ≈ 0.03 s
    for name in never:
        conn.exec_driver_sql(f"ANALYZE (SKIP_LOCKED) {quote(name)}")  # another transaction analyzing it: go on
