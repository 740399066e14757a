"""A Pull stopped (the test's own exception, as Dagster's Terminate or a notebook's Ctrl-C raises one) after the
network to its PostgreSQL server has stopped carrying bytes: the stop ends the Pull within the time it gives
the server to answer a cancel, instead of waiting for the network for ever, and keeps no file. Once the
network carries bytes again, the same store pulls the file (the connection given up is not used again).

The network is a loopback proxy that the test freezes (:mod:`tests.servers.freezing_proxy`) as the export
reports its first progress; by the time the exception is raised, every reader of the connection waits for
bytes that do not come, Arrow's read-ahead thread (Parquet) included."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from connector_ops import invoke
from connector_ops.frames import push_frame
from connector_ops.kernel.progress import reporting_to
from connector_ops.resources.virtual_files import pg_cancel
from connector_ops.resources.virtual_files.engines import get_engine
from tests.conftest import resources_on
from tests.servers.freezing_proxy import FreezingProxy
from tests.signals import Stop

CANCEL_SECONDS = 1.0  # the time the store gives a server to answer a cancel, shortened for the test
WATCHDOG_SECONDS = 30.0  # a stop that has not ended by then is a hang: the network is thawed to end it


def _unix_socket(url: str) -> str:
    parsed = sa.make_url(url)
    return f"{parsed.query['host']}/.s.PGSQL.{parsed.port or 5432}"


def _freeze_then_stop(proxy: FreezingProxy, raised: list[float]) -> Any:
    class Reporter:
        def __init__(self, _description: str, _total: int | None, _unit: str) -> None:
            pass

        def update(self, _n: int) -> None:
            proxy.freeze()
            time.sleep(0.5)  # the readers drain what the kernel holds, then wait on the frozen connection
            raised.append(time.monotonic())
            raise Stop

        def close(self) -> None:
            pass

    return Reporter


@pytest.mark.parametrize("export_type", ["csv", "json", "parquet"])
def test_a_pull_stopped_while_the_network_is_frozen_ends_within_the_cancel_time(postgres_url, tmp_path: Path,
                                                                                monkeypatch, export_type):
    monkeypatch.setattr(pg_cancel, "CANCEL_SECONDS", CANCEL_SECONDS)
    with FreezingProxy(_unix_socket(postgres_url)) as proxy:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/postgres"
        resources = resources_on(url, tmp_path / "home")
        rows = 300_000  # more than the kernel's buffers and Arrow's read-ahead hold
        vf = push_frame(pa.table({"a": ["x" * 100] * rows, "b": [str(i) for i in range(rows)]}), resources)
        folder = resources["platform_files"].root
        before = sorted(folder.iterdir())
        watchdog = threading.Timer(WATCHDOG_SECONDS, proxy.thaw)
        watchdog.start()
        raised: list[float] = []
        try:
            with pytest.raises(Stop), reporting_to(_freeze_then_stop(proxy, raised)):
                invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": "out"}, resources)
            took = time.monotonic() - raised[0]
        finally:
            watchdog.cancel()
            proxy.thaw()
        # the clean-up's wait, its cancel's (each CANCEL_SECONDS), and slack; without the limit, the watchdog's
        assert took < 4 * CANCEL_SECONDS, f"the stop took {took:.1f} s after the exception: it waited for the network"
        assert sorted(folder.iterdir()) == before
        again = invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": "out"}, resources)
        assert again["platformFile"]["size"] > 0
        get_engine(url).dispose()  # its sessions, before the proxy they go through closes
