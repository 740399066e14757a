"""Shared fixtures: a real PostgreSQL server, per-test SQLite files, resources on a temporary home.

PostgreSQL: ``CONNECTOR_OPS_TEST_DATABASE_URL`` if set, else a throwaway server for the session
(``tests/postgres_server.py``: ``pgserver`` on Python 3.11/3.12, else the PostgreSQL binaries on PATH, run as
``nobody`` by root). When it cannot start the PostgreSQL tests are skipped locally, but under ``CI=true`` the
run fails: CI must never pass without having run them.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

if "XDG_RUNTIME_DIR" not in os.environ:  # pgserver's platformdirs wants a private one; gone when the tests end
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="xdg-")
    atexit.register(shutil.rmtree, os.environ["XDG_RUNTIME_DIR"], ignore_errors=True)

from connector_ops.environment import resources_for
from tests import loopback_only, postgres_server
from tests.signals import signalled_after  # noqa: F401 (a fixture for every test)

loopback_only.install()
# Dagster's webserver and daemon upload telemetry to telemetry.dagster.io at once on a fresh DAGSTER_HOME, from
# child processes the socket net above does not reach: every process the tests start inherits this
os.environ["DAGSTER_DISABLE_TELEMETRY"] = "1"

CSV_SPECTRUM = Path(__file__).parent / "data" / "csv-spectrum"

# A shell without job control (a script, `cmd &`, some CI runners) starts a background job with SIGINT ignored,
# and an ignored signal is kept across fork and exec: every xdist worker and every command line a test starts
# then ignored Ctrl-C, and the tests of Ctrl-C and SIGTERM failed (a child never stopped; `files serve` read
# to the end of a server that never ended) — in some workers only, since a notebook test that set Python's
# handler again mended the rest. Each process of the suite starts as a terminal's would: Python's handler, so
# its children inherit SIGINT's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
#: Ctrl-C's handler as the suite runs
_SIGINT_AT_START = signal.getsignal(signal.SIGINT)
_last_test: list[str] = ["(none yet)"]


@pytest.fixture(autouse=True)
def ctrl_c_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test starts and ends with Ctrl-C's handler as the suite set it (above). A process left ignoring
    SIGINT makes the children of every later test ignore it too, and one left with another handler changes
    what later tests of Ctrl-C see. Fails the test that left it changed (or names the one before, when a
    fixture's teardown did), and puts the handler back."""
    before = signal.getsignal(signal.SIGINT)
    previous, _last_test[0] = _last_test[0], request.node.nodeid
    if before is not _SIGINT_AT_START:
        signal.signal(signal.SIGINT, _SIGINT_AT_START)
        pytest.fail(f"SIGINT's handler was {before!r} as this test began, not {_SIGINT_AT_START!r}: left by what "
                    f"ran after the test before it began ({previous})")
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"the test left SIGINT's handler {after!r} (it was {before!r})")


def _start_postgres() -> tuple[str, Any]:
    url = os.environ.get("CONNECTOR_OPS_TEST_DATABASE_URL")
    if url:
        return url, None
    server = postgres_server.start()
    return server.url, server


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    try:
        url, server = _start_postgres()
    except Exception as exc:  # pragma: no cover - depends on the machine
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL test server could not start under CI=true: {exc!r}")
        pytest.skip(f"PostgreSQL test server could not start: {exc!r}")
    yield url
    from connector_ops.resources.virtual_files.engines import dispose_all

    dispose_all()
    if server is not None:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def own_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """As ``database_url``, but on PostgreSQL a database of the test's own, dropped afterwards: for a test
    that sweeps or marks a whole store (the suite's database is shared by every test of the process)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'vf.db'}"
        return
    import psycopg
    from sqlalchemy.engine import make_url

    server = make_url(request.getfixturevalue("postgres_url"))
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"own_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every test using this runs twice: on a fresh SQLite file and on the PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'vf.db'}"
    return request.getfixturevalue("postgres_url")


def clear_connector_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, for the test, every variable of the connector environment this process was given."""
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_", "SMTP_", "DAGSTER_HOME")):
            monkeypatch.delenv(name)


@pytest.fixture
def env(tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A clean connector environment on a temporary home (also set in os.environ for invoke())."""
    clear_connector_environment(monkeypatch)
    values = {
        "CONNECTOR_OPS_HOME": str(tmp_path / "home"),
        "CONNECTOR_OPS_DATABASE_URL": database_url,
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


@pytest.fixture
def resources(env: dict[str, str]) -> dict[str, Any]:
    return resources_for(environ=env)


def resources_on(url: str, home: Path, **settings: str) -> dict[str, Any]:
    """Resources on the database at ``url``, its query given ``settings`` too (``options``,
    ``application_name``: a URL of its own is an engine, so sessions, of its own)."""
    if settings:
        url += ("&" if "?" in url else "?") + urlencode(settings)
    return resources_for(environ={"CONNECTOR_OPS_HOME": str(home), "CONNECTOR_OPS_DATABASE_URL": url})


@pytest.fixture
def postgres_resources(postgres_url: str, tmp_path: Path) -> dict[str, Any]:
    """Resources on the PostgreSQL server only, for what only PostgreSQL does."""
    return resources_on(postgres_url, tmp_path / "home")


@pytest.fixture
def store(resources: dict[str, Any]) -> Any:
    from tests.virtual_files import StoreForTests

    return StoreForTests.of(resources["virtual_files"])


@pytest.fixture
def files(resources: dict[str, Any]) -> Any:
    return resources["platform_files"]


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Push's JSON on the columnar path for every size (as for a file over 4 MiB on SQLite), recording whether
    the row reader (``etl.actions.read_json``) ran: a test asserts ``paths == []`` for "columnar only"."""
    from connector_ops.etl import actions
    from connector_ops.resources.virtual_files import sqlite_loader

    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    ran: list[str] = []
    real = actions.read_json

    def row_reader(*args: Any, **kwargs: Any) -> Any:
        ran.append("rows")
        return real(*args, **kwargs)

    monkeypatch.setattr(actions, "read_json", row_reader)
    return ran
