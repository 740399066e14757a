"""A net under the whole suite: sockets of this process may connect only to 127.0.0.0/8, ::1 or Unix paths.

The guide's rule is that tests send traffic only to loopback, never to a private, link-local or public
address, not even to prove that we refuse it. The SSRF tests rely on our own guard refusing before any
connection; if a regression broke that guard, this net turns the would-be connection into a loud
``PermissionError`` instead of a packet leaving the machine. It patches the standard library's socket,
not project code, so every Python client (httpx, smtplib, redis) is covered alike; psycopg connects through
libpq in C, below Python's socket, so its ``connect`` is judged by the hosts of its connection string.

Child processes (Dagster's webserver and daemon, Celery, JupyterLab, Chromium) are outside this net: they are
pointed at loopback servers by the tests, and conftest turns Dagster's telemetry off for all of them.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def is_loopback_destination(family: int, address: Any) -> bool:
    """Whether a ``connect`` destination stays on this machine (Unix sockets and loopback addresses)."""
    if family == getattr(socket, "AF_UNIX", None):
        return True
    if family not in (socket.AF_INET, socket.AF_INET6):
        return False
    host = address[0]
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:  # a name: resolve it the way connect would, and judge every answer
        infos = socket.getaddrinfo(host, address[1], family)
        return bool(infos) and all(is_loopback_destination(family, info[4]) for info in infos)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _checked(sock: socket.socket, address: Any) -> None:
    if not is_loopback_destination(sock.family, address):
        raise PermissionError(f"test traffic must stay on 127.0.0.0/8; refused a connection to {address!r}")


def _connect(self: socket.socket, address: Any) -> None:
    _checked(self, address)
    _real_connect(self, address)


def _connect_ex(self: socket.socket, address: Any) -> int:
    _checked(self, address)
    return _real_connect_ex(self, address)


def is_loopback_conninfo(conninfo: str = "", **kwargs: Any) -> bool:
    """Whether a libpq connection string (and keyword arguments) names only Unix sockets and loopback hosts."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(make_conninfo(conninfo, **kwargs))
    hosts = [h for key in ("host", "hostaddr") for h in str(params.get(key) or "").split(",") if h]
    port = int(str(params.get("port") or "5432").split(",")[0])
    return all(host.startswith("/") or host.startswith("@")
               or is_loopback_destination(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port))
               for host in hosts)  # no host at all: libpq's default Unix socket


def _judged(connect: Any) -> Any:
    def judged(cls: Any, conninfo: str = "", **kwargs: Any) -> Any:
        if not is_loopback_conninfo(conninfo, **{k: v for k, v in kwargs.items() if k in _LIBPQ_KEYS}):
            raise PermissionError(f"test traffic must stay on 127.0.0.0/8; refused PostgreSQL at {conninfo!r}")
        return connect.__func__(cls, conninfo, **kwargs)

    return classmethod(judged)


_LIBPQ_KEYS = ("host", "hostaddr", "port", "dbname", "user")


def install() -> None:
    """Patch ``socket.socket`` and psycopg's ``connect`` for the rest of this process."""
    import psycopg

    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
    psycopg.Connection.connect = _judged(psycopg.Connection.connect)  # type: ignore[method-assign]
    psycopg.AsyncConnection.connect = _judged(psycopg.AsyncConnection.connect)  # type: ignore[method-assign]
    psycopg.connect = psycopg.Connection.connect  # the module's alias, bound when psycopg was imported
