"""A Pull or a Push stopped (the test's own exception, as Dagster's Terminate or a notebook's Ctrl-C raises
one) after the network to its PostgreSQL server has stopped carrying bytes: the stop ends the action within
twice the time the store gives the server to answer a cancel, instead of waiting for the network for ever,
and keeps nothing (no platform file, no virtual file, no row table). Once the network carries bytes again,
the same store runs the action (the connection given up is not used again).

The network is a loopback proxy that the test freezes (:mod:`tests.servers.freezing_proxy`).
- Pull: frozen as the export reports its first progress, and the exception raised half a second later,
  when every reader of the connection waits for bytes that do not come (Arrow's read-ahead thread, for
  Parquet, included).
- Push: frozen at three quarters of the file, and the exception raised by a signal a second later, when
  psycopg's writer thread waits inside a write that the network does not take, and the Push waits for room
  in that thread's queue.
- Query: frozen before it starts, and the signal sent a second later, while the pool pings the connection
  it is about to hand out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from connector_ops import invoke
from connector_ops.frames import push_frame
from connector_ops.kernel.progress import reporting_to
from connector_ops.resources.virtual_files import pg_cancel
from connector_ops.resources.virtual_files.engines import get_engine
from tests.conftest import resources_on
from tests.servers.freezing_proxy import FreezingProxy
from tests.signals import Stop, at_progress
from tests.store_activity import orphans

CANCEL_SECONDS = 1.0  # the time the store gives a server to answer a cancel, shortened for the test
WATCHDOG_SECONDS = 30.0  # a stop that has not ended by then is a hang: the network is thawed to end it
ROWS = 300_000  # more than the kernel's buffers and Arrow's read-ahead hold
TABLE = pa.table({"a": ["x" * 100] * ROWS, "b": [str(i) for i in range(ROWS)]})


def _unix_socket(url: str) -> str:
    parsed = sa.make_url(url)
    return f"{parsed.query['host']}/.s.PGSQL.{parsed.port or 5432}"


@pytest.fixture
def frozen_store(postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Resources on the test server through a :class:`FreezingProxy`, the proxy, and the store's URL."""
    monkeypatch.setattr(pg_cancel, "CANCEL_SECONDS", CANCEL_SECONDS)
    with FreezingProxy(_unix_socket(postgres_url)) as proxy:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/postgres"
        yield resources_on(url, tmp_path / "home"), proxy, url
        get_engine(url).dispose()  # its sessions, before the proxy they go through closes


def _freezing_at(proxy: FreezingProxy, units: int, then: Callable[[], None]) -> Any:
    """A progress reporter factory whose reporters freeze the network once ``units`` are done, then ``then()``."""
    def freeze_then() -> None:
        proxy.freeze()
        then()
    return at_progress(units, freeze_then)


def _stopped_within_limit(proxy: FreezingProxy, action: str, payload: dict, resources: Any,
                          reporter: Any, raised: list[float]) -> None:
    """Run the action, which the reporter stops; the stop ends within the limit after its exception."""
    watchdog = threading.Timer(WATCHDOG_SECONDS, proxy.thaw)
    watchdog.start()
    try:
        with pytest.raises(Stop), reporting_to(reporter):
            invoke(action, payload, resources)
        took = time.monotonic() - raised[0]
    finally:
        watchdog.cancel()
        proxy.thaw()
    # the clean-up's wait and its cancel's (each CANCEL_SECONDS), and slack; without the limit, the watchdog's
    assert took < 4 * CANCEL_SECONDS, f"the stop took {took:.1f} s after the exception: it waited for the network"


@pytest.mark.parametrize("export_type", ["csv", "json", "parquet"])
def test_a_pull_stopped_while_the_network_is_frozen_ends_within_the_cancel_time(frozen_store, export_type):
    resources, proxy, _ = frozen_store
    vf = push_frame(TABLE, resources)
    folder = resources["platform_files"].root
    before = sorted(folder.iterdir())
    raised: list[float] = []

    def stop() -> None:
        time.sleep(0.5)  # the readers drain what the kernel holds, then wait on the frozen connection
        raised.append(time.monotonic())
        raise Stop

    pull = {"virtualFileId": vf, "exportType": export_type, "exportName": "out"}
    _stopped_within_limit(proxy, "etl.pull", pull, resources, _freezing_at(proxy, 1, stop), raised)
    assert sorted(folder.iterdir()) == before
    assert invoke("etl.pull", pull, resources)["platformFile"]["size"] > 0


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_push_stopped_while_the_network_is_frozen_ends_within_the_cancel_time(frozen_store, tmp_path: Path,
                                                                                signalled_after, kind):
    resources, proxy, url = frozen_store
    source = tmp_path / f"rows.{kind}"
    if kind == "csv":
        pacsv.write_csv(TABLE, source)
    else:
        pq.write_table(TABLE, source, row_group_size=20_000)
    pf = resources["platform_files"].add_file(source).to_json()
    store = resources["virtual_files"]
    before = store.inventory()
    raised: list[float] = []

    def stop_in_a_second() -> None:  # the Push goes on until it waits for the writer thread, stuck in a write
        signalled_after(1.0)
        raised.append(time.monotonic() + 1.0)

    # Parquet reports rows, text bytes; three quarters are past the 16 MiB that a Push reads before it writes
    late = (ROWS if kind == "parquet" else pf["size"]) * 3 // 4
    push = {"platformFile": pf}
    _stopped_within_limit(proxy, "etl.push", push, resources, _freezing_at(proxy, late, stop_in_a_second), raised)
    assert store.inventory() == before
    assert orphans(url) == set()
    assert invoke("etl.push", push, resources)["virtualFileId"]


def test_an_action_stopped_in_the_check_of_its_pooled_connection_ends_as_its_stop(frozen_store, signalled_after):
    """The pool pings a connection before handing it out; the ping's ``finally`` sets ``autocommit`` back,
    which psycopg refuses while the interrupted ping still runs: that error replaced the interrupt (a 500)."""
    resources, proxy, _ = frozen_store
    vf = push_frame(TABLE.slice(0, 10), resources)  # and its connection back in the pool
    proxy.freeze()
    signalled_after(1.0)
    raised = [time.monotonic() + 1.0]
    query = {"virtualFileId": vf, "query": {"b": "3"}}
    _stopped_within_limit(proxy, "etl.query", query, resources, None, raised)
    assert invoke("etl.query", query, resources)["result"] == [{"a": "x" * 100, "b": "3"}]
