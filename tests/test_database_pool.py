"""Each process's PostgreSQL pool is sized by the deployment (``CONNECTOR_OPS_DATABASE_POOL_SIZE``,
``…_MAX_OVERFLOW``, ``…_POOL_TIMEOUT``): bad values are named before anything connects, a pool too small for
one action is refused, and the smallest pool allowed runs the main job. The 503 of a pool with no connection
free is in test_platform_files_database.py."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest

from connector_ops.environment import resources_for
from connector_ops.kernel.errors import InvalidInput


@pytest.mark.parametrize(("variable", "value", "least", "what"), [
    ("CONNECTOR_OPS_DATABASE_POOL_SIZE", "0", 1, "connections"),
    ("CONNECTOR_OPS_DATABASE_MAX_OVERFLOW", "-1", 0, "connections"),
    ("CONNECTOR_OPS_DATABASE_POOL_TIMEOUT", "30s", 1, "seconds"),
])
def test_a_bad_pool_setting_is_named_before_anything_connects(variable: str, value: str, least: int, what: str,
                                                               tmp_path: Path) -> None:
    """A typo in a unit file is a 400 naming its variable when the resources are built, not a driver error at
    the first action. Port 1 of loopback: nothing listens, and nothing may be asked to."""
    environ = {"CONNECTOR_OPS_HOME": str(tmp_path), variable: value,
               "CONNECTOR_OPS_DATABASE_URL": "postgresql+psycopg://user:secret@127.0.0.1:1/store"}
    for keys in (["virtual_files"], ["platform_files"]):
        with pytest.raises(InvalidInput) as info:
            resources_for(keys, {**environ, "CONNECTOR_OPS_FILES_BACKEND": "database"})
        assert info.value.status == 400
        assert str(info.value) == f"{variable}: must be a whole number of {what}, at least {least}, got {value!r}"


def test_a_pool_too_small_for_one_action_is_refused(tmp_path: Path) -> None:
    """One connection in all: a Map, which reads on one connection while it stores on another, would wait for
    itself until the time-out and then be told to try again. Refused when the resources are built."""
    environ = {"CONNECTOR_OPS_HOME": str(tmp_path), "CONNECTOR_OPS_DATABASE_POOL_SIZE": "1",
               "CONNECTOR_OPS_DATABASE_MAX_OVERFLOW": "0",
               "CONNECTOR_OPS_DATABASE_URL": "postgresql+psycopg://user:secret@127.0.0.1:1/store"}
    with pytest.raises(InvalidInput) as info:
        resources_for(["virtual_files"], environ)
    assert str(info.value) == (
        "CONNECTOR_OPS_DATABASE_MAX_OVERFLOW: CONNECTOR_OPS_DATABASE_POOL_SIZE=1 and "
        "CONNECTOR_OPS_DATABASE_MAX_OVERFLOW=0 allow 1 connection, and an action may need 2 at once (a Map "
        "reads its file on one while it stores its rows on the other)")
    assert "secret" not in str(info.value)
    resources_for(["virtual_files"], {**environ, "CONNECTOR_OPS_DATABASE_MAX_OVERFLOW": "1"})  # 2 in all: fine


def test_the_main_job_runs_on_the_smallest_pool_allowed(postgres_url: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two connections in all are enough for every step of sales_report (Push, Validate, Join, Map, Query,
    Pull …): no step waits for a connection it holds itself. A wait would end in the 503 after 5 s."""
    from connector_ops.pipelines.definitions import build_definitions

    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}application_name=small_{uuid.uuid4().hex[:8]}"
    for name, value in (("POOL_SIZE", "1"), ("MAX_OVERFLOW", "1"), ("POOL_TIMEOUT", "5")):
        monkeypatch.setenv(f"CONNECTOR_OPS_DATABASE_{name}", value)
    resources = resources_for(environ={"CONNECTOR_OPS_HOME": str(tmp_path / "home"), "CONNECTOR_OPS_DATABASE_URL": url})
    result = build_definitions().get_job_def("sales_report").execute_in_process(
        resources=resources, instance=dg.DagsterInstance.ephemeral())
    assert result.success
    pool = resources["virtual_files"].sql.engine.pool
    assert (pool.size(), pool._max_overflow) == (1, 1)
