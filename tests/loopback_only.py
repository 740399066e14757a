"""A net under the whole suite: sockets of this process may connect only to 127.0.0.0/8, ::1 or Unix paths.

The guide's rule is that tests send traffic only to loopback, never to a private, link-local or public
address, not even to prove that we refuse it. The SSRF tests rely on our own guard refusing before any
connection; if a regression broke that guard, this net turns the would-be connection into a loud
``PermissionError`` instead of a packet leaving the machine. It patches the standard library's socket,
not project code, so every client (httpx, psycopg, smtplib, redis) is covered alike.
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


def install() -> None:
    """Patch ``socket.socket`` for the rest of this process."""
    socket.socket.connect = _connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
