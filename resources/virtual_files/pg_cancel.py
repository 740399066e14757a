"""A psycopg connection that stops its running statement when it is rolled back or closed mid-statement.

psycopg answers ``KeyboardInterrupt`` and ``SystemExit`` during its wait for the server by cancelling the
statement and reading the server's answer, so the connection can roll back. An interrupt that is neither
(Dagster's ``DagsterExecutionInterruptedError``, a caller's own signal), or one raised in Python code
between sending a statement and waiting for it, left the statement running in the server and the
connection busy:

- SQLAlchemy closes such a connection, and a closed connection does not stop its statement: a terminated
  run's fan-out Join went on writing in the server for over 10 s, holding its locks;
- where the store reads through the driver itself (a Pull's pages), the rollback as the transaction ended
  failed with "another command is already in progress", and that error replaced the interrupt: a Pull
  stopped so (by a test's own signal) ended as a 500 "database error".

:class:`CancellingConnection` cancels such a statement and reads the server's answer (libpq's own calls),
so the rollback that follows works and the connection stays usable. It does so as the interrupt leaves
psycopg's wait, too, as psycopg does for Ctrl-C: the pool's ping of a connection it hands out sets
``autocommit`` back in a ``finally``, which psycopg refuses while the ping still runs, and that error replaced
the interrupt (a 500). A server that does not answer within ``CANCEL_SECONDS`` costs the connection: it is
closed, and its transaction ends with the session.

The clean-up that follows an interrupt (a server-side cursor's ``CLOSE``, the end of a ``COPY``, the
rollback) waits for the server too, and psycopg gives those waits no limit: with the network to the server
stopped (a dropped VPN, a partition; a test freezes a loopback proxy), a stopped Pull waited for ever. While
an interrupt is on its way, a wait on the connection that goes on ``CANCEL_SECONDS`` is cancelled in the
server, and ``CANCEL_SECONDS`` later the connection is given up (:meth:`CancellingConnection.give_up`): its
socket is shut, which ends every wait on it in every thread, and the interrupt goes on as itself.
"""

from __future__ import annotations

import contextlib
import logging
import select
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import pq

from connector_ops.kernel.aborts import shut

log = logging.getLogger(__name__)

#: how long the server gets to take a cancel request and end the statement (psycopg's own figure for
#: ``KeyboardInterrupt``)
CANCEL_SECONDS = 5.0


def cancel_on_interrupt(engine: sa.Engine) -> None:
    """The engine's connections are :class:`CancellingConnection` objects (through SQLAlchemy's
    ``do_connect`` hook, which is given the arguments it would pass to ``psycopg.connect``)."""
    _quiet_ended_copies()
    @sa.event.listens_for(engine, "do_connect")
    def connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        return CancellingConnection.connect(*cargs, **cparams)


class _OurEndedCopies(logging.Filter):
    """Drops psycopg's "error ignored terminating <Copy>" for a ``COPY`` of ours. psycopg logs the server's
    error when a ``COPY`` ends on an exception of its own; a Push's ``COPY`` that the server refuses (a
    ragged row) ends so, and the error's CONTEXT quotes the row (``COPY vf_…, line 3: "…"``): file content
    in the log of every caller whose logging shows warnings. The row reader then words the error itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        copy = record.args[0] if isinstance(record.args, tuple) and record.args else None
        return not (record.msg == "error ignored terminating %r: %s"
                    and isinstance(getattr(copy, "connection", None), CancellingConnection))


_QUIET = _OurEndedCopies()


def _quiet_ended_copies() -> None:
    psycopg_log = logging.getLogger("psycopg")
    if _QUIET not in psycopg_log.filters:
        psycopg_log.addFilter(_QUIET)


class CancellingConnection(psycopg.Connection):
    _abandoned = False

    def rollback(self) -> None:
        if self._stop_statement():
            self._finish()
        else:
            super().rollback()

    def close(self) -> None:
        self._stop_statement()
        super().close()

    def cancel_safe(self, *, timeout: float = 30.0) -> None:
        if not self._abandoned:  # given up: no server to ask (psycopg's own ``COPY`` exit would wait 5 s more)
            super().cancel_safe(timeout=timeout)

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        """psycopg's wait; while an interrupt is on its way (the clean-up after it), a bounded one."""
        pending = sys.exception()
        if pending is None or isinstance(pending, Exception) or args[1:] or "timeout" in kwargs:
            try:
                return super().wait(gen, *args, **kwargs)
            except Exception:
                raise
            except BaseException:  # an interrupt in the wait: the statement stopped, as psycopg does for Ctrl-C,
                if self._stop_statement():  # so the clean-up after it finds the connection idle (or closed)
                    self._finish()
                raise
        if self._abandoned:
            raise pending  # no clean-up on a connection given up: the interrupt goes on
        with self.bounded() as acted:
            try:
                return super().wait(gen, *args, **kwargs)
            except Exception:
                if not acted.is_set():
                    raise
        raise pending  # the watcher's cancel or shut socket ended this wait: the interrupt goes on, unchained

    @contextlib.contextmanager
    def bounded(self) -> Iterator[threading.Event]:
        """The work in this block (clean-up after an interrupt or error) waits on the server at most
        ``CANCEL_SECONDS``: then its statement is cancelled, and ``CANCEL_SECONDS`` later (or at once, if the
        cancel fails) the connection is given up. Yields an event set once either was needed."""
        ended, acted = threading.Event(), threading.Event()

        def watch() -> None:
            if ended.wait(CANCEL_SECONDS):
                return
            acted.set()
            with contextlib.suppress(Exception):  # the server unreachable: giving up is all that is left
                self.cancel_safe(timeout=CANCEL_SECONDS)
                if ended.wait(CANCEL_SECONDS):
                    return
            log.warning("the database did not answer within %.0f s of a stop or failure: connection given up",
                        2 * CANCEL_SECONDS)
            self.give_up()

        threading.Thread(target=watch, name="cop-pg-stop-watch", daemon=True).start()
        try:
            yield acted
        finally:
            ended.set()

    def give_up(self) -> None:
        """Shut the connection's socket: every wait on it, in any thread, ends with an error at once (closing
        it from here would free what another thread's wait still uses), and no statement is sent again."""
        self._abandoned = True
        with contextlib.suppress(Exception):  # already closed (libpq's socket is then -1, or raises)
            shut(self.pgconn.socket)

    def _finish(self) -> None:
        """Close a connection given up, in its own thread: its state then reads as closed (a ping, a rollback,
        SQLAlchemy's restore of ``autocommit`` skip it), where libpq would still think its statement runs."""
        with contextlib.suppress(Exception):
            self.pgconn.finish()

    def _stop_statement(self) -> bool:
        """Cancel a statement still running and read its end; whether the connection had to be given up
        (now or before), which leaves nothing to roll back."""
        if not self._abandoned and self.pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
            try:
                self.cancel_safe(timeout=CANCEL_SECONDS)
                _drain(self.pgconn, time.monotonic() + CANCEL_SECONDS)
            except Exception:  # the server gone or slow: closing is all that is left
                self.give_up()
        return self._abandoned


def _drain(pgconn: pq.abc.PGconn, deadline: float) -> None:
    """Read every result of the statement sent (rows of a ``COPY TO`` included) until the connection is idle."""
    waiting = select.poll()  # not select.select, which refuses a descriptor past 1,023 (a busy process's)
    waiting.register(pgconn.socket, select.POLLIN)

    def readable() -> None:
        if not waiting.poll(max(0.0, deadline - time.monotonic()) * 1000):
            raise TimeoutError("the server did not end the cancelled statement")
        pgconn.consume_input()

    while True:
        while pgconn.is_busy():
            readable()
        result = pgconn.get_result()
        if result is None:
            return
        while result.status == pq.ExecStatus.COPY_OUT:
            size, _ = pgconn.get_copy_data(1)  # without waiting: 0 means none yet, -1 the end (an error raises)
            if size < 0:
                break
            if size == 0:
                readable()
