"""A SQLite statement stops when a signal's handler raises (:mod:`.interrupts`): promptly, with the
handler's exception or ``KeyboardInterrupt`` instead of pysqlite's ``OperationalError('interrupted')``; a
function's own error stays itself. The signal is SIGUSR1 with a handler of the test's own, so that a late
one cannot stop pytest. The entry points users interrupt are in ``test_interrupts.py``."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector_ops.resources.virtual_files.interrupts import InterruptibleConnection
from tests.signals import Stop

#: a statement of pure virtual-machine work that runs for many seconds: counting to 10^8
LONG = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000) "
        "SELECT count(*) FROM c WHERE {condition}")


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(tmp_path / "db.sqlite", factory=InterruptibleConnection, isolation_level=None)
    yield connection
    connection.close()


@pytest.mark.parametrize("through", ["cursor", "execute shortcut"])
def test_a_long_statement_stops_at_a_signal_with_keyboard_interrupt(conn, signalled_after, through):
    """The handler raises in the progress handler as it is entered, where pysqlite drops what it raised:
    KeyboardInterrupt stands for it. The connection's ``execute`` shortcut too (its cursor made in C)."""
    executor = conn.cursor() if through == "cursor" else conn
    signalled_after(0.3)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        executor.execute(LONG.format(condition="x % 7 = 0")).fetchall()
    assert time.monotonic() - started < 2  # the statement alone runs for tens of seconds


def test_a_signal_reaching_a_function_stops_the_statement(conn, signalled_after):
    """In a function the statement calls per row, the handler runs as the function is entered (dropped by
    pysqlite: KeyboardInterrupt) or inside its body (recorded: the handler's own exception)."""
    conn.create_function("slow_check", 1, lambda x: x % 7 == 0)
    signalled_after(0.3)
    started = time.monotonic()
    with pytest.raises((KeyboardInterrupt, Stop)):
        conn.cursor().execute(LONG.format(condition="slow_check(x)")).fetchall()
    assert time.monotonic() - started < 2


def test_a_functions_own_error_is_raised_as_itself_and_only_once(conn):
    def failing(x: int) -> int:
        if x == 5:
            raise ValueError("no fives")
        return 1

    conn.create_function("failing", 1, failing)
    cursor = conn.cursor()
    try:  # not pytest.raises: a KeyboardInterrupt in its place would stop the test session
        cursor.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 9) "
                       "SELECT sum(failing(x)) FROM c").fetchall()
    except BaseException as exc:
        raised: BaseException | None = exc
    else:
        raised = None
    assert isinstance(raised, ValueError) and str(raised) == "no fives", repr(raised)
    assert conn.failure.error is None  # handed over, not kept for a later statement
    assert cursor.execute("SELECT failing(1)").fetchall() == [(1,)]


def test_other_errors_and_results_are_pysqlites(conn):
    cursor = conn.cursor()
    with pytest.raises(sqlite3.OperationalError, match="syntax error"):
        cursor.execute("SELEC 1")
    cursor.execute("CREATE TABLE t (a)")
    cursor.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(5)])
    assert cursor.execute("SELECT a FROM t ORDER BY a").fetchmany(2) == [(0,), (1,)]
    assert cursor.fetchone() == (2,)
    assert cursor.fetchall() == [(3,), (4,)]
    assert isinstance(conn.cursor(), sqlite3.Cursor)
    conn.executescript("CREATE TABLE s (a); INSERT INTO s VALUES (1);")  # the connection's shortcuts
    conn.executemany("INSERT INTO s VALUES (?)", [(2,), (3,)])
    assert conn.execute("SELECT a FROM s ORDER BY a").fetchall() == [(1,), (2,), (3,)]


def test_a_statement_that_ends_is_not_stopped_by_the_handler(conn):
    """The progress handler runs hundreds of times in this statement and lets it go on."""
    assert conn.cursor().execute(LONG.format(condition="x % 1000000 = 0").replace("100000000", "3000000")
                                 ).fetchall() == [(3,)]
