"""A Pull stopped while its statement waits in the PostgreSQL server (another session locks the file's row
table), by an exception that is neither ``KeyboardInterrupt`` nor an ``Exception`` (the test's own signal;
Dagster's Terminate raises such a one). psycopg cancels a waiting statement only on ``KeyboardInterrupt``;
the store's connections cancel it themselves as they roll back (``pg_cancel.CancellingConnection``). So the
exception goes on as itself (not as "another command is already in progress"), the server ends the
statement at once (not after the cancel's time limit, which would cost the connection), and the file can be
pulled again as soon as the lock is let go.

The signal is sent once the server lists the Pull's lock request as waiting, so it lands inside psycopg's
wait on every run."""

from __future__ import annotations

import os
import signal
import threading
import time

import pyarrow as pa
import pytest
import sqlalchemy as sa

from connector_ops import invoke
from connector_ops.frames import push_frame
from connector_ops.resources.virtual_files.engines import get_engine
from connector_ops.resources.virtual_files.pg_cancel import CANCEL_SECONDS
from tests.signals import Stop
from tests.store_activity import open_snapshots


def _waiting_on(url: str, table: str) -> bool:
    """Whether a session waits for a lock on ``table``."""
    with get_engine(url).connect() as conn:
        return bool(conn.execute(sa.text(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = CAST(:t AS regclass)"),
            {"t": table}).scalar_one())


def _signal_once_waiting(url: str, table: str, done: threading.Event) -> threading.Thread:
    def watch() -> None:
        while not done.is_set():
            if _waiting_on(url, table):
                os.kill(os.getpid(), signal.SIGUSR1)
                return
            time.sleep(0.02)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
@pytest.mark.parametrize("export_type", ["csv", "json", "parquet"])
def test_a_pull_stopped_while_its_statement_waits_in_the_server_ends_as_its_stop(env, files, signalled_after,
                                                                                 export_type):
    url = env["CONNECTOR_OPS_DATABASE_URL"]
    vf = push_frame(pa.table({"a": ["x" * 10] * 1000}))
    with get_engine(url).connect() as conn:
        table = conn.execute(sa.text("SELECT table_name FROM cop_virtual_file WHERE id = :vf"),
                             {"vf": vf}).scalar_one()
    before = sorted(files.root.iterdir())
    locker = sa.create_engine(url, poolclass=sa.NullPool).connect()  # a session of its own, not the store's
    done = threading.Event()
    try:
        locker.execute(sa.text(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE'))
        watcher = _signal_once_waiting(url, table, done)
        started = time.monotonic()
        with pytest.raises(Stop) as stopped:
            invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": "out"})
        took = time.monotonic() - started
        assert stopped.traceback
        assert not _waiting_on(url, table)  # the statement was cancelled, with the lock still held
    finally:
        done.set()
        locker.rollback()
        locker.close()
    watcher.join()
    assert took < CANCEL_SECONDS, f"the stop took {took:.1f} s: the server did not end the statement"
    assert sorted(files.root.iterdir()) == before
    assert open_snapshots(url, vf) == 0
    again = invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": "out"})
    assert again["platformFile"]["size"] > 0
