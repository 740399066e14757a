"""The process session: made once however many threads make their first call together, and anew in a forked
child, whose sessions build their own resources and leave their parent's alone."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from connector_ops import session as sessions


@pytest.fixture
def no_process_session() -> Iterator[None]:
    kept = sessions._default
    sessions._default = None
    yield
    made, sessions._default = sessions._default, kept
    if made is not None and made is not kept:
        made.close()


def _first_call(barrier: threading.Barrier, seen: list[int]) -> None:
    barrier.wait()
    seen.append(id(sessions.default_session()))


def test_concurrent_first_calls_share_one_process_session(no_process_session: None) -> None:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race, if any, shows in a few trials
    try:
        for _ in range(200):
            sessions._default = None
            seen: list[int] = []
            barrier = threading.Barrier(8)

            threads = [threading.Thread(target=_first_call, args=(barrier, seen)) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert len(set(seen)) == 1, "threads making their first call together got different sessions"
    finally:
        sys.setswitchinterval(interval)


def _in_fork(check: Callable[[], bool]) -> bool:
    """Whether ``check()`` holds in a child made by ``fork`` (its answer is the child's exit status)."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if check() else 1)
        finally:
            os._exit(2)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_a_forked_child_makes_its_own_sessions_resources(no_process_session: None, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    parent = sessions.default_session()
    files = parent.resources_for(["platform_files"])["platform_files"]
    client = files._client()  # a connection pool the parent uses
    mine = sessions.Session()
    my_files = mine.resources_for(["platform_files"])["platform_files"]

    def child() -> bool:
        theirs = sessions.default_session()
        own = theirs.resources_for(["platform_files"])["platform_files"]
        mine.close()  # the parent's resources are not the child's to close
        return theirs is not parent and own is not files and own._client() is not client \
            and mine.resources_for(["platform_files"])["platform_files"] is not my_files

    assert _in_fork(child)
    assert not client.is_closed and my_files._client() is not None
    assert parent.resources_for(["platform_files"])["platform_files"] is files
    mine.close()


def _open_under(folder: Path) -> list[str]:
    """This process's descriptors open on files under ``folder`` (a store's file, its -wal and -shm)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


def test_a_closed_session_leaves_no_database_file_open(tmp_path: Path) -> None:
    import pandas as pd

    import connector_ops as co

    for i in range(5):
        with sessions.Session({"CONNECTOR_OPS_HOME": str(tmp_path / f"tenant-{i}")}) as session:
            vf = co.push_frame(pd.DataFrame({"a": ["1", "2"]}), resources=session.resources_for(["virtual_files"]))
            assert session.invoke("etl.query", {"virtualFileId": vf, "query": {"a": "2"}})["result"] == [{"a": "2"}]
            assert _open_under(tmp_path / f"tenant-{i}")  # open while the session is
    assert _open_under(tmp_path) == []


def test_the_process_session_keeps_its_engine_when_a_session_on_the_same_store_closes(
        no_process_session: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    import connector_ops as co
    from connector_ops.resources.virtual_files.engines import get_engine

    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    co.push_frame(pd.DataFrame({"a": ["1"]}))
    url = sessions.default_session().resources_for(["virtual_files"])["virtual_files"].database_url
    engine = get_engine(url)
    with sessions.Session({"CONNECTOR_OPS_HOME": str(tmp_path)}) as session:
        co.push_frame(pd.DataFrame({"a": ["2"]}), resources=session.resources_for(["virtual_files"]))
    assert get_engine(url) is engine  # pinned by the process session: its pool kept


def test_dagster_steps_keep_the_engine_between_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dagster builds and closes resources per run (per step in a multiprocess run): the store's engine, and its
    pooled sessions, outlive them, or every step would reconnect to PostgreSQL."""
    import dagster as dg
    import pandas as pd

    import connector_ops as co
    from connector_ops.ops.resources import dagster_resources
    from connector_ops.resources.virtual_files.engines import get_engine

    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    used: list[Any] = []

    @dg.op(required_resource_keys={"virtual_files"})
    def push(context) -> None:  # unannotated: with postponed annotations dagster would see a string
        store = context.resources.virtual_files
        co.push_frame(pd.DataFrame({"a": ["1"]}), resources={"virtual_files": store})
        used.append(get_engine(store.database_url))

    @dg.job
    def pushing() -> None:
        push()

    for _ in range(2):
        assert pushing.execute_in_process(resources=dagster_resources(keys=["virtual_files"])).success
    assert used[0] is used[1]
