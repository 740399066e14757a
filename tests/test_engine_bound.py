"""A process going through many stores keeps a bounded number of them open (:data:`engines.KEPT_ENGINES`).

A notebook kernel switching stores, or a loop over per-day store files, once kept every store's engine, and
each engine its SQLite file, log and shared memory open: the process ran out of descriptors after a few hundred
stores. The least recently used idle engine is now closed when one more is made; an engine in use (a
transaction open on it, a ``Session`` holding it) never is, and a store whose engine was closed works again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from connector_ops import session as sessions
from connector_ops.resources.virtual_files import engines
from connector_ops.resources.virtual_files.engines import KEPT_ENGINES, get_engine
from tests.virtual_files import StoreForTests


def descriptors() -> list[str]:
    """What this process's open descriptors name (files, sockets, pipes)."""
    named = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            named.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # the listing's own descriptor, closed since
            continue
    return named


def open_stores(folder: Path) -> set[str]:
    """The store folders under ``folder`` with a file open in this process (``vf.db``, its log or its memory)."""
    return {Path(name).parent.name for name in descriptors() if name.startswith(str(folder))}


def used_store(url: str) -> tuple[StoreForTests, str]:
    """A store on ``url`` with a file written and read back, closed as a notebook's ``with`` would close it."""
    with StoreForTests(database_url=url) as store:
        vf = store.create_from_rows([{"a": "1"}, {"a": "2"}])
        assert store.rows(vf) == [{"a": "1"}, {"a": "2"}]
    return store, vf


@pytest.fixture
def stores_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "stores"
    folder.mkdir()
    return folder


def test_a_loop_over_many_stores_keeps_a_bounded_number_open(stores_dir: Path) -> None:
    before = len(descriptors())
    urls = [f"sqlite:///{stores_dir / f'day-{i}' / 'vf.db'}" for i in range(3 * KEPT_ENGINES)]
    made = [used_store(url) for url in urls]

    assert len(open_stores(stores_dir)) <= KEPT_ENGINES
    # three descriptors per idle store kept (its file, log and shared memory); each of the 48 kept them open
    assert len(descriptors()) - before <= 3 * KEPT_ENGINES
    first, vf = made[0]
    assert first.rows(vf) == [{"a": "1"}, {"a": "2"}]  # its engine closed long ago: a new one reads it


def test_an_engine_with_a_transaction_open_is_not_closed_to_make_room(stores_dir: Path) -> None:
    store, vf = used_store(f"sqlite:///{stores_dir / 'busy' / 'vf.db'}")
    engine = get_engine(store.database_url)
    with store.reading() as conn:
        for i in range(KEPT_ENGINES + 2):
            used_store(f"sqlite:///{stores_dir / f'other-{i}' / 'vf.db'}")
        assert conn.execute(sa.text("SELECT count(*) FROM cop_virtual_file")).scalar() == 1
    assert get_engine(store.database_url) is engine
    assert store.rows(vf) == [{"a": "1"}, {"a": "2"}]


def test_a_store_an_open_session_holds_is_not_closed_to_make_room(tmp_path: Path, stores_dir: Path) -> None:
    import pandas as pd

    import connector_ops as co

    with sessions.Session({"CONNECTOR_OPS_HOME": str(tmp_path / "held")}) as session:
        store = session.resources_for(["virtual_files"])["virtual_files"]
        vf = co.push_frame(pd.DataFrame({"a": ["1"]}), resources={"virtual_files": store})
        engine = get_engine(store.database_url)
        for i in range(KEPT_ENGINES + 2):
            used_store(f"sqlite:///{stores_dir / f'other-{i}' / 'vf.db'}")
        assert get_engine(store.database_url) is engine
        assert session.invoke("etl.query", {"virtualFileId": vf, "query": {}})["result"] == [{"a": "1"}]
    assert open_stores(tmp_path / "held") == set()  # the session's close disposed of it, as before


def test_a_database_in_memory_is_never_closed_to_make_room(stores_dir: Path) -> None:
    url = "sqlite://"
    engines.dispose(url)  # a database in memory of this test's own
    store, vf = used_store(url)
    for i in range(KEPT_ENGINES + 2):
        get_engine(f"sqlite:///{stores_dir / f'other-{i}' / 'vf.db'}")
    assert store.rows(vf) == [{"a": "1"}, {"a": "2"}]  # closing its engine would have lost its rows
    engines.dispose(url)
