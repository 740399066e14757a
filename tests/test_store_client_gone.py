"""A process using the store dies mid-statement (a Celery worker SIGKILLed by the OOM killer, a host lost):
PostgreSQL notices a vanished client only when it next writes to it, so a Join's ``CREATE TABLE … AS`` (which
sends nothing until it ends) ran on for its minutes, holding its locks. The store's sessions ask the server
to check the client every ``CLIENT_CHECK_MS`` while a statement runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from connector_ops.resources.virtual_files.engines import CLIENT_CHECK_MS, get_engine
from tests.deployment import wait_for

pytestmark = pytest.mark.postgres

STATEMENT = """
import sys
import sqlalchemy as sa
from connector_ops.resources.virtual_files.engines import get_engine
with get_engine(sys.argv[1]).connect() as conn:
    conn.execute(sa.text(f"SELECT pg_sleep(600) /* {sys.argv[2]} */"))
"""


def backends(url: str, tag: str) -> list[int]:
    """Server processes running the statement marked ``tag``."""
    with get_engine(url).connect() as conn:
        return list(conn.execute(sa.text(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE :q AND pid <> pg_backend_pid()"),
            {"q": f"%/* {tag} */%"}).scalars())


def test_the_statement_of_a_killed_process_stops_in_the_server(postgres_url: str) -> None:
    tag = f"client-gone-{uuid.uuid4().hex}"
    child = subprocess.Popen([sys.executable, "-c", STATEMENT, postgres_url, tag])
    try:
        wait_for(lambda: bool(backends(postgres_url, tag)), "the statement in the server", 60)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        wait_for(lambda: not backends(postgres_url, tag), "the server ends the statement",
                 CLIENT_CHECK_MS / 1000 + 5)
    finally:
        child.kill()
        with get_engine(postgres_url).connect() as conn:  # the server's process, if the test failed
            for pid in backends(postgres_url, tag):
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
