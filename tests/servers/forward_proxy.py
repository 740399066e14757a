"""A loopback forward proxy, as a company's egress proxy is to its clients: ``GET http://host/…`` in absolute
form relayed for http:// URLs, ``CONNECT host:port`` tunnelled for https:// ones.

It plays a network whose only way out is the proxy: the names it is given (``hosts``: ``mailjet.test`` →
``127.0.0.1``) resolve there and nowhere else (``.test`` names resolve nowhere on the test's host), and it
connects only to loopback addresses. ``credentials`` makes it demand ``Proxy-Authorization`` (407 without
the right one), ``forbidden`` names destinations its policy refuses (403), ``silent`` destinations whose
requests it reads and never answers (an overloaded proxy, or one that drops what it does not allow).
``received`` records every request it was sent (relayed or refused): the method, the target as written,
and the ``Proxy-Authorization`` sent.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import select
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme

from tests.servers import ClosedOnExit


@dataclass(frozen=True)
class Received:
    method: str
    target: str  # ``http://host:port/path`` (absolute form) or ``host:port`` (CONNECT)
    authorization: str | None
    relayed: bool


class ForwardProxy(ClosedOnExit):
    def __init__(self, hosts: dict[str, str] | None = None, *, credentials: tuple[str, str] | None = None,
                 forbidden: frozenset[str] = frozenset(), silent: frozenset[str] = frozenset()) -> None:
        self.hosts = dict(hosts or {})
        self.credentials = credentials
        self.forbidden = forbidden
        self.silent = silent
        self.received: list[Received] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, user: str | None = None, password: str | None = None) -> str:
        """The proxy's URL, with ``user:password@`` if given (as ``HTTPS_PROXY`` would hold it)."""
        auth = f"{user}:{password}@" if user is not None else ""
        return f"http://{auth}127.0.0.1:{self.port}"

    @property
    def targets(self) -> list[str]:
        return [r.target for r in self.received]

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()
        self._thread.join(5)


    # -- the proxy ----------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError), client:
            reader = client.makefile("rb")
            while True:  # one request after another on a kept-alive connection, until one is tunnelled
                line = reader.readline(65536)
                if not line.strip():
                    return
                method, target, _version = line.decode("latin-1").split()
                headers: list[tuple[str, str]] = []
                while (header := reader.readline(65536)) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode("latin-1").partition(":")
                    headers.append((name.strip(), value.strip()))
                given = {name.lower(): value for name, value in headers}
                authorization = given.get("proxy-authorization")
                host, port = self._destination(method, target)
                if host in self.silent:
                    self.received.append(Received(method, target, authorization, False))
                    self._closed.wait()  # the client's read times out, or the proxy closes
                    return
                refusal, address = self._refusal(authorization, host), self._address(host)
                if refusal is None and address is None:  # a name it does not know, or no loopback address
                    refusal = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                self.received.append(Received(method, target, authorization, refusal is None))
                if refusal is not None or address is None:
                    client.sendall(refusal or b"")
                    return
                upstream = socket.create_connection((address, port), timeout=10)
                with upstream:
                    if method == "CONNECT":
                        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        self._tunnel(client, reader, upstream)
                        return
                    self._forward(reader, client, upstream, method, target, headers, given)
                    return  # the answer ended with the upstream's connection: this one closes too

    def _destination(self, method: str, target: str) -> tuple[str, int]:
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            return host.strip("[]"), int(port)
        parts = urlsplit(target)
        return parts.hostname or "", parts.port or 80

    def _refusal(self, authorization: str | None, host: str) -> bytes | None:
        if self.credentials is not None:
            expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()
            if authorization != expected:
                return (b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"test\"\r\n"
                        b"Content-Length: 0\r\nConnection: close\r\n\r\n")
        if host in self.forbidden:
            return b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        return None

    def _address(self, host: str) -> str | None:
        """Where ``host`` is, for this proxy alone: its own names, or a loopback address (never anything else)."""
        address = self.hosts.get(host, host)
        try:
            return address if ipaddress.ip_address(address).is_loopback else None
        except ValueError:
            return None

    @staticmethod
    def _forward(reader: object, client: socket.socket, upstream: socket.socket, method: str, target: str,
                 headers: list[tuple[str, str]], given: dict[str, str]) -> None:
        """One absolute-form request: sent on in origin form with its body, the whole answer sent back."""
        parts = urlsplit(target)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = [(n, v) for n, v in headers if n.lower() not in ("proxy-authorization", "proxy-connection",
                                                                "connection", "keep-alive")]
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in kept) + "Connection: close\r\n\r\n"
        body = reader.read(int(given.get("content-length", "0") or 0))  # type: ignore[attr-defined]
        upstream.sendall(head.encode("latin-1") + body)
        answer = b""
        while chunk := upstream.recv(65536):
            answer += chunk
        status, _, rest = answer.partition(b"\r\n")
        client.sendall(status + b"\r\nConnection: close\r\n" + rest)  # the answer ends where the upstream's did

    def _tunnel(self, client: socket.socket, reader: object, upstream: socket.socket) -> None:
        """Bytes both ways until either side closes. The client speaks first (TLS's hello, once it has read the
        200), so what the reader holds, or its next read, goes first."""
        buffered = reader.peek(1)  # type: ignore[attr-defined]
        if buffered:
            upstream.sendall(reader.read(len(buffered)))  # type: ignore[attr-defined]
        ends = [client, upstream]
        while not self._closed.is_set():
            ready, _, _ = select.select(ends, [], [], 0.2)
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                (upstream if sock is client else client).sendall(data)


#: every variable a proxy may come from, as curl and httpx read them (either case)
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def proxy_env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """The proxy variables exactly ``values`` (``HTTPS_PROXY="…"``): none of the test host's own remains, in
    either case. Clients read them when they are made, so set them before the first call of a resource."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def trusting(ca: trustme.CA, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our clients trust ``ca`` (``SSL_CERT_FILE``, which httpx reads as a deployment behind a TLS-inspecting
    proxy would set it), for test servers whose certificates it issued."""
    path = folder / "test-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    monkeypatch.setenv("SSL_CERT_FILE", str(path))
