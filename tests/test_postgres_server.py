"""tests/postgres_server.py's start without pgserver (what Python 3.13 has: pgserver has no wheel for it), from
the PostgreSQL binaries; as root (CI) they run as ``nobody``, since initdb and postgres refuse root."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg

from tests import postgres_server


def test_a_server_from_the_binaries_runs_with_its_settings_and_goes_when_stopped() -> None:
    server = postgres_server.start_from_binaries("connector-ops-pg-check-", {"max_connections": "10"})
    folder = Path(server.url.split("host=", 1)[1])
    try:
        with psycopg.connect(server.url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
            assert conn.execute("SHOW max_connections").fetchone() == ("10",)
            assert conn.execute("SELECT 'B' < 'a'").fetchone() == (True,)  # bytewise order, as pgserver's
        owner = os.stat(folder / "data").st_uid  # the cluster's user: this one, or nobody for root
        assert owner == (os.geteuid() if os.geteuid() != 0 else postgres_server.pwd.getpwnam("nobody").pw_uid)
    finally:
        server.stop()
    assert not folder.exists()
