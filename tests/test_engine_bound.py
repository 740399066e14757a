"""A process going through many stores keeps a bounded number of them open (:data:`engines.KEPT_ENGINES`).

A notebook kernel switching stores, or a loop over per-day store files, once kept every store's engine, and
each engine its SQLite file, log and shared memory open: the process ran out of descriptors after a few hundred
stores. The least recently used idle engine is now closed when one more is made; an engine in use (a
transaction open on it, a ``Session`` holding it) never is, and a store whose engine was closed works again.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def other_engines(stores_dir: Path, n: int = KEPT_ENGINES) -> None:
    """Engines of ``n`` other stores asked for: as many as are kept close the least recently used."""
    for i in range(n):
        get_engine(f"sqlite:///{stores_dir / f'other-{i}' / 'vf.db'}")


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


@contextlib.contextmanager
def every_kept_engine_in_use(stores_dir: Path) -> Iterator[None]:
    """:func:`other_engines`, each with a connection checked out for the block: none of them may be closed."""
    other_engines(stores_dir)
    in_use = [get_engine(f"sqlite:///{stores_dir / f'other-{i}' / 'vf.db'}").connect() for i in range(KEPT_ENGINES)]
    try:
        yield
    finally:
        for conn in in_use:
            conn.close()


def another_thread_builds_one_more(stores_dir: Path) -> None:
    """A store's engine built by another thread (its room made there), waited for."""
    building = threading.Thread(target=get_engine, args=(f"sqlite:///{stores_dir / 'built' / 'vf.db'}",))
    building.start()
    building.join(60)
    assert not building.is_alive()


def test_the_engine_just_made_is_kept_when_every_other_is_in_use(stores_dir: Path) -> None:
    """With every kept engine in use, the one just made was the only one left to close: its caller got an engine
    already let go of (its file no longer watched for being replaced, its checkpoints no longer run)."""
    with every_kept_engine_in_use(stores_dir):
        url = f"sqlite:///{stores_dir / 'new' / 'vf.db'}"
        engine = get_engine(url)
        assert engines.store_file(url) is not None and get_engine(url) is engine  # kept, not closed


def test_an_engine_handed_out_is_kept_until_its_caller_has_used_it(stores_dir: Path) -> None:
    """With every kept engine in use, another thread's build closed the engine this thread had just been handed
    (kept, returned, no connection of it checked out yet): the same engine let go of as the one just made was
    (its file no longer watched, its checkpoints no longer run). It is in use until its caller has used it."""
    with every_kept_engine_in_use(stores_dir):
        url = f"sqlite:///{stores_dir / 'handed' / 'vf.db'}"
        engine = get_engine(url)  # kept; this thread has not used it yet
        another_thread_builds_one_more(stores_dir)
        assert engines.store_file(url) is not None and get_engine(url) is engine  # kept, not closed


def test_a_checkout_of_a_replaced_engine_leaves_the_new_one_handed(stores_dir: Path) -> None:
    """A store's file replaced, its engine is built anew under the same key and handed to this thread; a
    connection of the old engine (which the thread still held) checked out next ended the entry meant for the
    new one, which another thread's build could then close before its first use (every other engine in use)."""
    folder = stores_dir / "replaced"
    url = f"sqlite:///{folder / 'vf.db'}"
    old = get_engine(url)
    old.connect().close()
    with every_kept_engine_in_use(stores_dir):
        for file in folder.iterdir():  # the store started over
            file.unlink()
        new = get_engine(url)  # the old one forgotten, a new one kept and handed to this thread
        assert new is not old
        with contextlib.suppress(Exception):  # its file is gone: it may refuse the connection, after the checkout
            old.connect().close()
        another_thread_builds_one_more(stores_dir)
        assert engines.store_file(url) is not None and get_engine(url) is new  # kept, not closed


def test_a_database_in_memory_is_never_closed_to_make_room(stores_dir: Path) -> None:
    url = "sqlite://"
    engines.dispose(url)  # a database in memory of this test's own
    store, vf = used_store(url)
    other_engines(stores_dir, KEPT_ENGINES + 2)
    assert store.rows(vf) == [{"a": "1"}, {"a": "2"}]  # closing its engine would have lost its rows
    engines.dispose(url)


BIG_ROWS = [(str(i), "v" * 60) for i in range(70_000)]  # a log past checkpoints.WAL_BYTES: a checkpoint is asked


def test_a_store_closed_while_its_checkpoint_waits_to_start_leaves_no_connection(
        stores_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The background checkpoint a large write asks for may not have begun when the store's engine is closed to
    make room. Its start is held here (the thread has taken it; :func:`checkpoints.checkpoint` has not run yet)
    while :data:`KEPT_ENGINES` other stores are used; once let go, it opened a connection to the closed store's
    file, which nothing closed again: three descriptors per such store, for the life of the process."""
    from connector_ops.resources.virtual_files import checkpoints

    url = f"sqlite:///{stores_dir / 'closed' / 'vf.db'}"
    path = str(Path(url.removeprefix("sqlite:///")))
    start, taken = threading.Event(), threading.Event()
    real = checkpoints.checkpoint

    def held(checkpointed: str, mode: str = "PASSIVE") -> None:
        if checkpointed == path:
            taken.set()
            assert start.wait(120)
        real(checkpointed, mode)

    monkeypatch.setattr(checkpoints, "checkpoint", held)
    StoreForTests(database_url=url).create_from_batches(["a", "b"], [BIG_ROWS])
    try:
        assert taken.wait(120)
        other_engines(stores_dir)
        assert engines.store_file(url) is None  # closed to make room, its checkpoint not begun
    finally:
        start.set()
    checkpoints.wait()
    assert "closed" not in open_stores(stores_dir)
    assert path not in checkpoints._connections


def test_asking_for_engines_does_not_wait_for_a_checkpoint_under_way(
        stores_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store's engine closed to make room while its checkpoint runs: the close waited for the checkpoint to
    end, holding the lock every thread takes to get any store's engine, and so did that store's engine made
    again (its catalog's check waited to write). Here the checkpoint is held as it opens its connection (inside
    :func:`checkpoints.checkpoint`); other stores are used until the store is closed, the store is asked for
    again, and another one, each by a thread of its own, all before the checkpoint is let go."""
    import sqlite3

    from connector_ops.resources.virtual_files import checkpoints

    url = f"sqlite:///{stores_dir / 'busy' / 'vf.db'}"
    path = str(Path(url.removeprefix("sqlite:///")))
    go, connecting = threading.Event(), threading.Event()
    real = sqlite3.connect

    def held(database: Any, *args: Any, **kwargs: Any) -> sqlite3.Connection:
        if threading.current_thread().name == "sqlite-checkpoints" and path in str(database):
            connecting.set()
            go.wait(120)
        return real(database, *args, **kwargs)

    def making_room() -> None:
        other_engines(stores_dir)

    store = StoreForTests(database_url=url)
    store.create_from_rows([{"a": "1"}])
    monkeypatch.setattr(checkpoints.sqlite3, "connect", held)
    store.create_from_batches(["a", "b"], [BIG_ROWS])
    try:
        assert connecting.wait(120)  # the checkpoint is under way
        another = f"sqlite:///{stores_dir / 'another' / 'vf.db'}"
        for work in (making_room, lambda: get_engine(url), lambda: get_engine(another)):
            thread = threading.Thread(target=work)
            thread.start()
            thread.join(30)
            assert not thread.is_alive() and not go.is_set()
            if work is making_room:
                assert engines.store_file(url) is None  # closed to make room
    finally:
        go.set()
    checkpoints.wait()
    assert sorted(store.count(vf) for vf, _ in store.inventory()) == [1, len(BIG_ROWS)]


def test_a_session_closed_lets_go_of_its_sqlite_file(tmp_path: Path) -> None:
    """When a ``with Session()`` block ends, its store's file is let go of: every connection closed, the
    checkpoint's too (closed by the checkpoint thread, which the close waits for), so the last one copied the
    log into the file and removed it — the file alone can be copied or moved."""
    with sessions.Session({"CONNECTOR_OPS_HOME": str(tmp_path / "home")}) as session:
        store = session.resources_for(["virtual_files"])["virtual_files"]
        vf = store.create_from_batches(["a", "b"], [BIG_ROWS])  # a log large enough for a checkpoint
    assert open_stores(tmp_path) == set()
    assert not (tmp_path / "home" / "virtual_files.db-wal").exists()
    assert StoreForTests(database_url=store.database_url).count(vf) == len(BIG_ROWS)
