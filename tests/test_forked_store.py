"""The virtual-file store in worker processes made by ``fork`` (a multiprocessing pool on Linux): a child's
engine opens connections of its own, never uses the sessions its parent pooled, and leaves them to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import connector_ops as co
from connector_ops.resources.virtual_files.engines import get_engine
from tests.forked import in_forked_workers


def _session_of(url: str) -> Any:
    """What tells one database session from another: PostgreSQL's backend pid, else the SQLite connection."""
    with get_engine(url).connect() as conn:
        if conn.dialect.name == "postgresql":
            return conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        return id(conn.connection.driver_connection)


def _work(args: tuple[str, int]) -> tuple[Any, str]:
    url, i = args
    try:
        vf = co.push_frame(pd.DataFrame({"a": [str(n) for n in range(i, i + 300)]}))
        found = co.invoke("etl.query", {"virtualFileId": vf, "query": {"a": str(i)}})["result"]
        return _session_of(url), "ok" if found == [{"a": str(i)}] else f"found {found}"
    except co.ConnectorError as exc:
        return None, str(exc)


def test_forked_workers_use_sessions_of_their_own(env: dict[str, str], database_url: str) -> None:
    co.push_frame(pd.DataFrame({"a": ["1"]}))  # the parent's pool keeps a session
    parents = _session_of(database_url)
    results = in_forked_workers(_work, [(database_url, i) for i in range(6)])
    assert [said for _, said in results] == ["ok"] * 6
    assert parents not in {session for session, _ in results}
    if database_url.startswith("postgresql"):  # the parent's session is still open: no child ended it
        with get_engine(database_url).connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                        (parents,)).scalar() == 1
    assert co.invoke("etl.query", {"virtualFileId": co.push_frame(pd.DataFrame({"a": ["x"]})),
                                   "query": {"a": "x"}})["result"] == [{"a": "x"}]


def test_a_connection_out_of_step_with_the_pool_is_not_called_unreachable(postgres_url: str, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A pooled session left inside a transaction behind the pool's back (as a session shared with a forked
    process is) fails its check-out with psycopg's own words: nothing to do with the URL's host, port, user or
    password, so the error does not send anyone to check them."""
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path))
    monkeypatch.setenv("CONNECTOR_OPS_DATABASE_URL", postgres_url)
    vf = co.push_frame(pd.DataFrame({"a": ["1"]}))
    engine = get_engine(postgres_url)
    engine.dispose()  # no idle session left by earlier tests of this process: the next check-out gets this one
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
    raw.execute("SELECT 1")  # in a transaction the pool does not know of
    try:
        with pytest.raises(co.ConnectorError) as raised:
            co.invoke("etl.query", {"virtualFileId": vf, "query": {"a": "1"}})
    finally:
        engine.dispose()  # the other tests of this process get sessions in step with the pool
    assert "can't change 'autocommit' now" in str(raised.value)
    assert "cannot connect" not in str(raised.value) and "check its host" not in str(raised.value)
