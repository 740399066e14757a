"""A Pull whose PostgreSQL session the server ends between two pages (``idle_in_transaction_session_timeout``:
the export took longer than that over one page) says the server's reason, as a Query does, and the dead
session is not handed to the next call.

Before, the pages are read through the driver's own cursor, so SQLAlchemy never saw the session end; it
rolled the transaction back on it as the read ended, and that failure, "the connection is lost", replaced the
server's words: ``500 database error: the connection is lost``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.environment import resources_for
from connector_ops.kernel.progress import reporting_to
from tests.signals import at_progress

#: milliseconds a session may sit idle inside a transaction on the test's engine
IDLE_MS = 1000  # long enough for a loaded machine's gaps between statements, short for a test


def test_a_pull_whose_session_the_server_ended_says_why(postgres_url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    url = postgres_url + ("&" if "?" in postgres_url else "?") + \
        f"options=-c%20idle_in_transaction_session_timeout%3D{IDLE_MS}"  # a URL of its own: an engine of its own
    environ = {"CONNECTOR_OPS_HOME": str(tmp_path / "home"), "CONNECTOR_OPS_DATABASE_URL": url}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    files = resources_for(environ=environ)["platform_files"]
    data = "id;city\n" + "".join(f"{i};city{i % 10}\n" for i in range(25_000))
    pf = files.add_bytes(data.encode(), "cities.csv", "text/csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf, "parameters": {"csvDelimiter": ";"}})["virtualFileId"]
    pull = {"virtualFileId": vf, "exportType": "csv", "exportName": "out.csv"}
    # the first page handed on, the export dawdles: the scan's session sits idle in its transaction
    with pytest.raises(ConnectorError) as err, reporting_to(at_progress(1, lambda: time.sleep(2.5 * IDLE_MS / 1000))):
        invoke("etl.pull", pull)
    assert (err.value.status, err.value.message) == (
        500, "database error: terminating connection due to idle-in-transaction timeout")
    again = invoke("etl.pull", pull)  # the ended session is not the next call's
    assert files.read_bytes(again["platformFile"]).decode().replace("\r\n", "\n") == data.replace(";", ",")
