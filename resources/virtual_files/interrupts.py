"""Statements that stop when the process is interrupted: Ctrl-C at the terminal, Jupyter's Stop,
Dagster's "Terminate" (each a SIGINT, whose handler raises ``KeyboardInterrupt``, or in a Dagster step
``DagsterExecutionInterruptedError``). A stopped statement's transaction rolls back: nothing is half-written.

**SQLite.** Python runs a signal's handler only between bytecodes of the main thread. A statement runs
inside SQLite's C code, so a Ctrl-C during a Join of two large files waited for the Join to end: a fan-out
Join ignored it for the 5 minutes it was given. :class:`InterruptibleConnection` gives Python that chance:
SQLite calls its progress handler every :data:`PROGRESS_STEPS` virtual-machine instructions, and a pending
handler runs as the call begins. What the handler raises makes SQLite abandon the statement.

pysqlite does not pass on an exception raised in a callback: it reports the statement as
``OperationalError('interrupted')`` (the progress handler) or ``OperationalError('user-defined function
raised exception')`` (a function such as ``$regex``'s, which the signal may reach first). The cursors
here raise what was meant instead: the function's own exception when it raised one (recorded by the
wrapper :meth:`InterruptibleConnection.create_function` puts around it), else :class:`KeyboardInterrupt`,
since only a signal's handler can raise where nothing records it: as a Python function is entered,
before any ``try`` of its own. Dagster's exception arrives as ``KeyboardInterrupt``; Dagster treats the
two alike.

**PostgreSQL.** psycopg's wait for a result answers a signal at once, and on ``KeyboardInterrupt`` (or
``SystemExit``) it also cancels the statement in the server. Any other interrupt (Dagster's) left it
running, and the connection busy: the store's connections are :class:`~.pg_cancel.CancellingConnection`
objects, which cancel such a statement as they are rolled back or closed.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from connector_ops.kernel.disk import DiskBelowFloor, DiskFloor
from connector_ops.kernel.progress import tick

#: SQLite virtual-machine instructions between two calls of the progress handler: 1.7 ms of a recursive
#: count (measured), a Python call each that costs nothing measurable in a Join or a scan (BENCHMARKS.md)
PROGRESS_STEPS = 100_000

_ABANDONED = frozenset({"interrupted", "user-defined function raised exception"})


class _Failure:
    """The last exception one of a connection's functions raised itself (not a signal as it was entered), and
    the floor of free disk space its write transaction keeps, if any (:func:`keeping`)."""

    __slots__ = ("error", "floor")

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.floor: DiskFloor | None = None


def _progress(failure: _Failure) -> Callable[[], int]:
    """The progress handler: a pending signal's handler runs as it is entered; the progress shown, if any,
    hears that the statement goes on (:func:`~connector_ops.kernel.progress.tick`: a Join's one statement
    otherwise showed nothing for seconds); then, in a transaction that keeps a floor, the free space is
    looked at (every ``CHECK_EVERY_SECONDS``). 0 means go on."""
    def progress() -> int:
        tick()
        floor = failure.floor
        if floor is not None:
            try:
                floor.check_soon()
            except DiskBelowFloor as exc:
                failure.error = exc
                return 1
        return 0
    return progress


@contextlib.contextmanager
def keeping(conn: Any, floor: DiskFloor | None) -> Iterator[None]:
    """Within this block the statements of ``conn`` (an SQLAlchemy connection on an
    :class:`InterruptibleConnection`) stop once the free space falls below ``floor``."""
    failure = getattr(conn.connection.driver_connection, "failure", None) if floor is not None else None
    if failure is None:
        yield
        return
    failure.floor = floor
    try:
        yield
    finally:
        failure.floor = None


def _translated(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of the cursor, raising what stopped the statement instead of pysqlite's report of it."""
    @functools.wraps(method)
    def call(self: InterruptibleCursor, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError as exc:
            if str(exc) not in _ABANDONED:
                raise
            failure = self.connection.failure
            error, failure.error = failure.error, None
            raise (error or KeyboardInterrupt()) from None
    return call


class InterruptibleCursor(sqlite3.Cursor):
    connection: InterruptibleConnection

    execute = _translated(sqlite3.Cursor.execute)
    executemany = _translated(sqlite3.Cursor.executemany)
    executescript = _translated(sqlite3.Cursor.executescript)
    fetchone = _translated(sqlite3.Cursor.fetchone)
    fetchmany = _translated(sqlite3.Cursor.fetchmany)
    fetchall = _translated(sqlite3.Cursor.fetchall)


class InterruptibleConnection(sqlite3.Connection):
    """A ``sqlite3`` connection (``sqlite3.connect(…, factory=InterruptibleConnection)``) whose statements
    stop on a signal, run through :class:`InterruptibleCursor`, its ``execute`` shortcuts' too (pysqlite
    would make their cursor in C, past :meth:`cursor`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failure = _Failure()
        self.set_progress_handler(_progress(self.failure), PROGRESS_STEPS)
        #: the cursors made and still alive (:meth:`rollback` ends their statements)
        self.cursors: weakref.WeakSet[sqlite3.Cursor] = weakref.WeakSet()

    def cursor(self, factory: Any = InterruptibleCursor) -> Any:
        cursor = super().cursor(factory)
        self.cursors.add(cursor)
        return cursor

    def rollback(self) -> None:
        """Roll back, the statements of the cursors still alive ended first (``Cursor.close`` resets its
        statement). A statement left active keeps its read snapshot after a rollback: an interrupt as a row
        was fetched (SQLAlchemy's fetch entered, before its ``try``) left one, alive in the traceback IPython
        keeps, on a connection the pool took back, whose next ``BEGIN IMMEDIATE`` then failed at once,
        "database is locked", once any other connection had written (its snapshot no longer the latest)."""
        for cursor in list(self.cursors):
            cursor.close()
        super().rollback()

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> Any:
        return self.cursor().executemany(sql, parameters)

    def executescript(self, script: str, /) -> Any:
        return self.cursor().executescript(script)

    def close(self) -> None:
        """Roll back, then close. A connection closed while one of its statements is still active (stepped,
        not reset: its cursor alive) is closed by SQLite only once that statement goes (``sqlite3_close_v2``
        makes it a "zombie"), and keeps its transaction, with the write lock, until then. An interrupt that
        lands in SQLAlchemy's code after a statement ran and before its rows are read (its events, its
        result) does exactly that: SQLAlchemy closes the connection (an exit exception invalidates it) but not
        the cursor, which the interrupt's traceback keeps — and IPython keeps the last traceback until the
        next error. After a Stop in a write, the next cell's write waited the 60 s busy timeout and failed
        "database is locked". The rollback ends the transaction whatever statement is active; no Python call
        before it (where a second signal's handler could raise first)."""
        try:  # noqa: SIM105  (contextlib.suppress would be a Python call, where a signal lands)
            self.rollback()
        except sqlite3.Error:
            pass
        super().close()

    def create_function(self, name: str, narg: int, func: Callable[..., Any] | None, *,
                        deterministic: bool = False) -> None:
        if func is not None:
            func = _recording(func, self.failure)
        super().create_function(name, narg, func, deterministic=deterministic)


def _recording(func: Callable[..., Any], failure: _Failure) -> Callable[..., Any]:
    """``func``, noting in ``failure`` what it raises, so that its own error is told from a signal's (the
    holder, not the connection, is captured: no cycle through pysqlite's C structures)."""
    @functools.wraps(func)
    def call(*args: Any) -> Any:
        try:
            return func(*args)
        except BaseException as exc:
            failure.error = exc
            raise
    return call

