"""The suite's network net (tests/loopback_only.py) judges destinations right and is installed."""

from __future__ import annotations

import socket

import pytest

from tests import loopback_only


@pytest.mark.parametrize("family,address,stays", [
    (socket.AF_INET, ("127.0.0.1", 80), True),
    (socket.AF_INET, ("127.200.3.4", 80), True),
    (socket.AF_INET, ("localhost", 80), True),
    (socket.AF_INET6, ("::1", 80, 0, 0), True),
    (socket.AF_INET, ("169.254.169.254", 80), False),
    (socket.AF_INET, ("10.0.0.1", 80), False),
    (socket.AF_INET, ("192.0.2.1", 443), False),
    (socket.AF_INET6, ("::ffff:169.254.169.254", 80, 0, 0), False),
    (socket.AF_INET6, ("::ffff:127.0.0.1", 80, 0, 0), True),
    (socket.AF_INET6, ("fd00::5", 80, 0, 0), False),
])
def test_destinations_are_judged_by_address(family, address, stays):
    assert loopback_only.is_loopback_destination(family, address) is stays


def test_unix_sockets_are_allowed():
    assert loopback_only.is_loopback_destination(socket.AF_UNIX, "/tmp/x.sock")


def test_the_net_is_installed_for_the_whole_suite():
    assert socket.socket.connect is loopback_only._connect
    assert socket.socket.connect_ex is loopback_only._connect_ex


@pytest.mark.parametrize("conninfo,stays", [
    ("host=/tmp/connector-ops-pg-x dbname=postgres", True),
    ("postgresql://postgres@127.0.0.1:5432/postgres", True),
    ("postgresql://postgres@localhost/postgres", True),
    ("dbname=postgres", True),  # libpq's default Unix socket
    ("postgresql://postgres@10.0.0.1/postgres", False),
    ("host=127.0.0.1,192.0.2.1 dbname=postgres", False),
    ("host=localhost hostaddr=169.254.169.254", False),
])
def test_postgresql_hosts_are_judged_by_address(conninfo, stays):
    assert loopback_only.is_loopback_conninfo(conninfo) is stays


def test_psycopg_connections_are_judged_for_the_whole_suite():
    """Checked on the installed hooks, never by connecting outside loopback (not even to see it refused)."""
    import psycopg
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    assert psycopg.connect.__func__.__qualname__.startswith("_judged")
    assert psycopg.Connection.connect.__func__.__qualname__.startswith("_judged")
    assert psycopg.AsyncConnection.connect.__func__.__qualname__.startswith("_judged")
    assert PGDialect_psycopg.import_dbapi().connect is psycopg.connect
    # only now that the hooks are known to be in place: they refuse before libpq opens a socket
    with pytest.raises(PermissionError, match=r"127\.0\.0\.0/8"):
        psycopg.connect(host="192.0.2.1", dbname="postgres", connect_timeout=1)
