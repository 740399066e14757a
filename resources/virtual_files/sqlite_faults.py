"""A SQLite file's environment faults, said in the words of the host that can fix them: one mapping for the
virtual-file store (its engine's ``handle_error`` hook, :func:`install`) and for the local drive's
``drive.db`` (:func:`sqlite_fault` around its own connections).

SQLite says what failed, never where or why: "disk I/O error" on a full disk (:mod:`.disk_full`), "unable
to open database file" on a read-only folder or with no file descriptors left (:mod:`.cannot_open`), each a
500 "database error: …" naming no file. The hook sees every statement, connects included, so a read (an
Iterate, a drive listing) is named as a write is.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import sqlalchemy as sa

from connector_ops.kernel.disk import DEFAULT_MIN_FREE_DISK, min_free_disk
from connector_ops.kernel.errors import ConfigurationError, ConnectorOpsError, chained
from connector_ops.resources.virtual_files.cannot_open import cannot_open_error, is_cannot_open
from connector_ops.resources.virtual_files.disk_full import full_error, is_full


def sqlite_fault(exc: BaseException, path: str, min_free: int,
                 done: str = "the write was rolled back, nothing was written") -> ConnectorOpsError | None:
    """The error to raise for SQLite's ``exc`` on the database file at ``path`` (``min_free``: the floor in
    force, for the message), or ``None`` when it is none of these faults: a full disk
    (:class:`~connector_ops.kernel.disk.DiskFull`), a file SQLite cannot open (:mod:`.cannot_open`: a read-only
    folder, permissions, no file descriptors left)."""
    if is_full(exc, path):
        return full_error(path, min_free, done=done)
    if is_cannot_open(exc):
        return cannot_open_error(path)
    return None


def sqlite_error_in(exc: BaseException) -> BaseException | None:
    """The SQLite error ``exc`` is, wraps (SQLAlchemy's ``orig``) or was raised from, if any."""
    for seen in chained(exc):
        orig = getattr(seen, "orig", None) or seen
        if isinstance(orig, sqlite3.Error):
            return orig
    return None


#: the execution option carrying the floor of the store whose engine it is (:func:`with_floor`)
FLOOR_OPTION = "connector_ops_min_free_disk"


def with_floor(engine: sa.Engine, min_free: int) -> sa.Engine:
    """``engine`` (same pool, same hooks) as a store with the floor ``min_free`` uses it: the engine is one per
    database for the whole process, while each store has its own ``min_free_disk`` (run config may set it
    apart from ``CONNECTOR_OPS_MIN_FREE_DISK``), so the floor a fault's message names travels with the
    connection rather than with the engine. One such engine per floor, kept on the shared engine (and gone
    with it): ``execution_options`` makes a new one each call (≈ 8 µs), and stores ask for theirs per call."""
    made = engine.__dict__.setdefault("_cop_with_floor", {})
    floored = made.get(min_free)
    if floored is None:
        floored = made[min_free] = engine.execution_options(**{FLOOR_OPTION: min_free})
    return floored


def _floor_of(ctx: sa.engine.ExceptionContext) -> int:
    """The floor of the store the failed statement or connect came from (:func:`with_floor`); for an engine
    used by no store (step outputs), the one ``CONNECTOR_OPS_MIN_FREE_DISK`` gives, as resources read it (a bad
    value is refused where the resource is made, not here)."""
    source = ctx.connection if ctx.connection is not None else ctx.engine
    floor = source.get_execution_options().get(FLOOR_OPTION) if source is not None else None
    if floor is not None:
        return int(floor)
    try:
        return min_free_disk()
    except ConfigurationError:
        return DEFAULT_MIN_FREE_DISK


def install(engine: sa.Engine, path: str) -> None:
    """Translate the faults of ``engine``'s SQLite file at ``path`` wherever they happen (a statement, a new
    connection's pragmas); anything else is left as SQLite said it."""

    @sa.event.listens_for(engine, "handle_error", retval=True)
    def on_error(ctx: sa.engine.ExceptionContext) -> Any:
        exc = ctx.original_exception
        if not isinstance(exc, sqlite3.Error):
            return None
        return sqlite_fault(exc, path, _floor_of(ctx))
