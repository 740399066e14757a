"""Bulk-load a new SQLite virtual file through the ADBC SQLite driver, in a child process.

ADBC binds whole Arrow columns in C (``adbc_ingest``): measured 2× faster than the ``sqlite3`` CLI's
``.import``. But the driver links its own copy of SQLite, and two copies of SQLite in one process corrupt a
database they both open (their POSIX locks cancel each other: sqlite.org/howtocorrupt.html §2.2.1, seen
here as "database disk image is malformed"). So the load runs in a child process (``python -m`` this
module), which creates the row table, its catalog rows and its rows in one ``BEGIN IMMEDIATE`` transaction
(it waits for other writers as ours do) and commits only if everything worked. The parent streams the
data to the child's stdin: CSV data rows (parsed and checked there, :mod:`.csv_columns`) or an Arrow IPC
stream. The child costs ≈ 0.6 s to start, so the store uses it for large loads only.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import IO, Any

MODULE = "connector_ops.resources.virtual_files.sqlite_ingest"
COMMITTED = b"committed\n"


class IngestFailed(RuntimeError):
    """The child rolled back (its last error line is the message)."""


def run(spec: dict[str, Any], feed: Callable[[IO[bytes]], None]) -> None:
    """Load in a child: ``spec`` says what to create (see :func:`_ingest`), ``feed`` writes the data."""
    with tempfile.TemporaryFile() as report, tempfile.TemporaryFile() as errors:
        child = subprocess.Popen([sys.executable, "-m", MODULE, json.dumps(spec)], stdin=subprocess.PIPE,
                                 stdout=report, stderr=errors)
        assert child.stdin is not None
        try:
            with contextlib.suppress(BrokenPipeError):  # the child stopped reading: its exit code tells
                feed(child.stdin)
                child.stdin.close()
        except BaseException:
            child.kill()  # nothing is committed: the child's transaction dies with it
            child.wait()
            raise
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()
        child.wait()
        report.seek(0)
        if report.read() != COMMITTED:  # the exit code alone could be a crash after the commit
            errors.seek(0)
            lines = errors.read().decode("utf-8", "replace").strip().splitlines() or ["no message"]
            raise IngestFailed(lines[-1])


def _ingest(spec: dict[str, Any], source: IO[bytes]) -> None:
    """The driver's own API, not its DB-API module (which imports pandas and polars: +0.4 s to start)."""
    import adbc_driver_manager as adbc
    import adbc_driver_sqlite
    import pyarrow as pa

    if spec["format"] == "csv":
        from connector_ops.resources.virtual_files.csv_columns import csv_batches

        reader = csv_batches(source, len(spec["columns"]), spec["delimiter"])
    else:
        reader = pa.ipc.open_stream(source)
    with contextlib.closing(adbc_driver_sqlite.connect(spec["path"])) as database, \
            contextlib.closing(adbc.AdbcConnection(database)) as conn:

        def execute(sql: str) -> None:
            with contextlib.closing(adbc.AdbcStatement(conn)) as statement:
                statement.set_sql_query(sql)
                statement.execute_update()

        for pragma in ("busy_timeout=60000", "synchronous=NORMAL", "foreign_keys=ON"):
            execute(f"PRAGMA {pragma}")
        execute("BEGIN IMMEDIATE")
        try:
            for sql in [spec["ddl"], *spec["inserts"]]:
                execute(sql)
            with contextlib.closing(adbc.AdbcStatement(conn)) as statement:
                statement.set_options(**{"adbc.ingest.target_table": spec["table_name"],
                                         "adbc.ingest.mode": "adbc.ingest.mode.append"})
                statement.bind_stream(reader)
                statement.execute_update()
            execute("COMMIT")
        except BaseException:
            execute("ROLLBACK")
            raise


def main() -> None:
    """Report the commit on stdout, then leave at once: Arrow's reader threads can abort the interpreter's
    teardown ("terminate called without an active exception"), which must not look like a failed load."""
    try:
        _ingest(json.loads(sys.argv[1]), sys.stdin.buffer)
    except BaseException as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(1)
    sys.stdout.buffer.write(COMMITTED)
    sys.stdout.buffer.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
