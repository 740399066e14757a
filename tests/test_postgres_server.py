"""tests/postgres_server.py's start without pgserver (what Python 3.13 has: pgserver has no wheel for it)."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from tests import postgres_server


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only")
def test_as_root_without_pgserver_the_error_says_what_to_set() -> None:
    with pytest.raises(RuntimeError, match="CONNECTOR_OPS_TEST_DATABASE_URL") as info:
        postgres_server.start_from_binaries()
    assert "initdb refuses to run as root" in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="initdb refuses to run as root")
def test_a_server_from_the_binaries_on_path_runs_with_its_settings_and_goes_when_stopped() -> None:
    try:
        postgres_server.binaries_folder()
    except RuntimeError as exc:
        if os.environ.get("CI", "").lower() == "true":
            raise
        pytest.skip(str(exc))
    server = postgres_server.start_from_binaries("connector-ops-pg-check-", {"max_connections": "10"})
    folder = Path(server.url.split("host=", 1)[1])
    try:
        with psycopg.connect(server.url.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
            assert conn.execute("SHOW max_connections").fetchone() == ("10",)
            assert conn.execute("SELECT 'B' < 'a'").fetchone() == (True,)  # bytewise order, as pgserver's
    finally:
        server.stop()
    assert not folder.exists()
