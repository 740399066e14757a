"""The store's layout stamp: which version of the catalog and row tables a database holds.

Every process of a deployment (code servers, the daemon, Celery workers, notebooks) opens the same
database, and they are not upgraded at the same instant. A process must never read or write tables laid
out by a newer connector-ops than its own as if they were its own layout: it would misread them or write
rows the newer code does not expect. So the first process to open a database stamps it with
:data:`LAYOUT_VERSION`, and a process whose code knows only older layouts refuses the store, saying which
versions met, before it reads or writes anything.

Layout 1 is every store written since the first release until layout 2: the tables had only been added to
(``create_all`` adds a missing one), never changed, so an unstamped store is layout 1 as it stands. The
release that changes a table raises :data:`LAYOUT_VERSION` and brings the step that upgrades a store from
the version before (:data:`_UPGRADES`), run here in the same transaction as the stamp. Layout 2 adds
``cop_array_cursor.moved_at`` (:func:`_date_array_positions`), layout 3 ``cop_virtual_file.seq_floor``
(:func:`_floor_row_numbers`).

The stamp is read when a process first opens a database (:func:`check_stamp`) and again inside a write
transaction (:func:`check_unchanged`) once :data:`RECHECK_SECONDS` have passed since that process last read
it: a long-lived process (a Celery worker, a code server, a notebook, ``files serve``) that opened the store
before a newer release raised its layout stops writing within a second. So **a release that raises the layout
stamps it in a transaction of its own, waits more than** :data:`RECHECK_SECONDS`, **then until every write
transaction begun before that has ended, and only then changes a table**: every process of a release that
knows the stamp has read it by then, and no write that began unchecked is still open. On SQLite its one
writer at a time does the last part by itself; on PostgreSQL a transaction locks a table only once it
touches it (a Push reaches the catalog at its end), so the release waits for ``pg_stat_activity.xact_start``
of the store's sessions to pass that moment. Reads are not checked again — a layout change that a process's
reads could misread is for the release that makes it to guard (its notes say to stop old processes first). The
inline-array Iterate's driver-level transaction reads it at every call (:mod:`.layout_version`), which opens a
connection anyway.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from connector_ops.kernel.version import package_version
from connector_ops.resources.virtual_files import catalog as cat
from connector_ops.resources.virtual_files.catalog import array_cursor, store_layout, write_ended
from connector_ops.resources.virtual_files.layout_version import LAYOUT_VERSION, refuse_newer

__all__ = ["LAYOUT_VERSION", "RECHECK_SECONDS", "check_stamp", "check_unchanged"]

#: seconds after which a process's next write transaction reads the stamp again
RECHECK_SECONDS = 1.0

#: the stamp's one row, by its key (built once: write transactions read it again, once a second)
_STAMP = sa.select(store_layout.c.version, store_layout.c.written_by).where(store_layout.c.id == 1)


def check_unchanged(conn: sa.Connection, shown_url: str) -> None:
    """Refuse a write transaction (``ActionFailed``) on a store a newer release stamped since this process
    opened it. ``conn``: the transaction just begun (SQLite: after ``BEGIN IMMEDIATE``, so no commit can come
    between the read and the writes)."""
    row = conn.execute(_STAMP).first()
    if row is not None:
        refuse_newer(row.version, row.written_by, shown_url)


def check_stamp(conn: sa.Connection, shown_url: str) -> None:
    """Stamp a store that has no stamp yet, upgrading it from layout 1 (what an unstamped store is); upgrade
    one of an older layout and stamp it anew; refuse one laid out by newer code (``ActionFailed``).

    ``conn`` is the catalog's creating transaction, after ``create_all``: two processes stamping (or
    upgrading) a PostgreSQL database together collide on the one row's key or the added column, and the
    loser's retry finds the winner's work. Each upgrade step finds its own change made already in a new
    store (``create_all`` made the tables as this code declares them)."""
    row = conn.execute(_STAMP).first()
    if row is not None:
        refuse_newer(row.version, row.written_by, shown_url)
        if row.version == LAYOUT_VERSION:
            return
    for version in range(1 if row is None else row.version, LAYOUT_VERSION):
        _UPGRADES[version](conn)
    stamp = {"version": LAYOUT_VERSION, "written_by": package_version()}
    if row is None:
        conn.execute(sa.insert(store_layout).values(id=1, **stamp))
    else:
        conn.execute(sa.update(store_layout).where(store_layout.c.id == 1).values(**stamp))


def _date_array_positions(conn: sa.Connection) -> None:
    """Layout 1 -> 2: ``cop_array_cursor`` gets ``moved_at``, and the positions it holds are dated now, as
    if moved at the upgrade: their age is unknown, and gc must not take a position still in use for an old
    one. Adding a nullable column is safe for a write of layout 1 still in flight (it names its columns and
    leaves this one NULL, which gc counts as old): no wait between the stamp and the change is needed."""
    column = array_cursor.c.moved_at
    if _added(conn, column):
        conn.execute(sa.update(array_cursor).where(column.is_(None)).values(moved_at=write_ended(conn)))


def _floor_row_numbers(conn: sa.Connection) -> None:
    """Layout 2 -> 3: ``cop_virtual_file`` gets ``seq_floor`` (:mod:`.seq_floors`). Which of a file's last
    rows an older Delete Rows took is not known, but what matters is known: on SQLite each file's floor
    starts at the furthest position an Iterate of its current rows holds, so the next append numbers its
    rows past what a running iteration has read. A fan-out (``etl_iterate_batches``) keeps no position here
    (its batches are step outputs) and loses no row without one: each batch reads the numbers its planned rows
    have, which SQLite never changes; only, after an older process took a file's last rows, a batch not yet
    read returns the rows appended since in their place (tests/test_store_layout.py). A write of layout 2
    still in flight leaves its files as they were, so no wait between the stamp and the change is needed."""
    if not _added(conn, cat.virtual_file.c.seq_floor) or conn.dialect.name != "sqlite":
        return
    vf, cursor = cat.virtual_file, cat.vf_cursor
    furthest = sa.select(sa.func.max(cursor.c.last_seq)).where(
        (cursor.c.vf_id == vf.c.id) & (cursor.c.generation == vf.c.generation)).scalar_subquery()
    conn.execute(sa.update(vf).values(seq_floor=furthest))


def _added(conn: sa.Connection, column: sa.Column) -> bool:
    """Add the nullable ``column`` to its catalog table unless the table has it already (a new store:
    ``create_all`` made it so); whether it was added."""
    table = column.table.name
    if column.name in {c["name"] for c in sa.inspect(conn).get_columns(table)}:
        return False
    kind = column.type.compile(dialect=conn.dialect)
    conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column.name} {kind}")
    return True


#: the step that upgrades a store of each older layout to the next
_UPGRADES: dict[int, Callable[[sa.Connection], None]] = {1: _date_array_positions, 2: _floor_row_numbers}
