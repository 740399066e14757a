"""A call that touches more virtual files in one transaction than the PostgreSQL server holds locks for.

Append Rows to thousands of files is one transaction that locks each file's table; past the server's lock
table (``max_locks_per_transaction`` × its connections) PostgreSQL answers "out of shared memory", which
reached the caller as a bare ``database error: out of shared memory``. A server of the test's own, with the
smallest lock table PostgreSQL allows, makes a few hundred files enough.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector_ops import ConnectorError
from connector_ops.environment import resources_for
from connector_ops.session import invoke
from tests import postgres_server

FILES = 600


@pytest.fixture(scope="module")
def small_lock_table() -> Iterator[str]:
    """A PostgreSQL server whose lock table holds ≈ 10 × (10 connections + its own workers) locks."""
    try:
        server = postgres_server.start("connector-ops-pg-locks-",
                                       {"max_locks_per_transaction": "10", "max_connections": "10"})
    except Exception as exc:  # pragma: no cover - depends on the machine
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL test server could not start under CI=true: {exc!r}")
        pytest.skip(f"PostgreSQL test server could not start: {exc!r}")
    yield server.url
    from connector_ops.resources.virtual_files.engines import dispose_all

    dispose_all()
    server.stop()


def test_a_call_past_the_servers_lock_table_says_so_and_changes_nothing(small_lock_table: str,
                                                                       tmp_path: Path) -> None:
    resources = resources_for(environ={"CONNECTOR_OPS_HOME": str(tmp_path), "CONNECTOR_OPS_MIN_FREE_DISK": "0",
                                       "CONNECTOR_OPS_DATABASE_URL": small_lock_table})
    store = resources["virtual_files"]
    ids = []
    for start in range(0, FILES, 50):  # 50 files per transaction: within the lock table
        with store.sql.writing() as conn:
            for i in range(start, start + 50):
                writer = store.sql.new_file(conn, ["a"])
                writer.write_tuples(["a"], [(str(i),)])
                ids.append(writer.vf_id)
    rows = [{"virtualFileId": vf_id, "content": {"a": "new"}} for vf_id in ids]
    with pytest.raises(ConnectorError) as info:
        invoke("etl.append_rows", {"rows": rows}, resources)
    assert info.value.status == 500 and not info.value.retryable
    message = info.value.body["message"]
    assert message.startswith("the database server's lock table is full (out of shared memory): "), message
    assert "max_locks_per_transaction" in message and "nothing was changed" in message
    for index in (0, FILES - 1):
        assert invoke("etl.query", {"virtualFileId": ids[index], "query": {}}, resources)["result"] == [
            {"a": str(index)}]
    assert invoke("etl.append_rows", {"rows": rows[:50]}, resources) == "ok"  # a few at a time: fine
