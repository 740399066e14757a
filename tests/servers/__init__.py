"""Loopback test servers: real HTTP on 127.0.0.1, started in a thread by the tests.

``serving(app)`` runs any ASGI app (Starlette) with uvicorn on a free port and yields its base URL;
``another_file_server`` serves a platform-file store of its own there, for links of "another server".
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import pytest
import uvicorn


class ClosedOnExit:
    """A test server used as ``with Server(…) as server:``, its ``close()`` called at the block's end."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(app: object, port: int | None = None, certificate: Any = None) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 in a background thread; yields ``http://127.0.0.1:<port>``, or
    ``https://…`` with ``certificate`` (a ``trustme`` leaf certificate: the server's key and chain)."""
    port = port or free_port()
    with contextlib.ExitStack() as stack:
        tls: dict[str, str] = {}
        if certificate is not None:
            pem = stack.enter_context(certificate.private_key_and_cert_chain_pem.tempfile())
            tls = {"ssl_certfile": pem, "ssl_keyfile": pem}
        with _served(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", **tls)):
            yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"


@contextlib.contextmanager
def _served(config: uvicorn.Config) -> Iterator[None]:
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextlib.contextmanager
def another_file_server(folder: Path, monkeypatch: pytest.MonkeyPatch,
                        wrap: Callable[[Any], Any] = lambda app: app) -> Iterator[Any]:
    """A platform-file store of its own in ``folder``, its files served on 127.0.0.1 (its app seen through
    ``wrap``) and its links open to the test's stores (``CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS``: loopback is
    refused by default, see tests/test_link_guard.py). Yields that store, whose links point at the server."""
    from connector_ops.resources.file_server import create_app
    from connector_ops.resources.platform_files import PlatformFileStore

    with serving(wrap(create_app(PlatformFileStore(files_dir=str(folder))))) as base:
        monkeypatch.setenv("CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS", base.removeprefix("http://"))
        yield PlatformFileStore(files_dir=str(folder), file_server_url=base)


def acting_once_answering(app: Any, act: Callable[[], None]) -> Any:
    """``app`` calling ``act`` (a delete, say) right after it has sent a response's headers, before its body:
    a race with a download made certain."""
    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        async def sending(message: Any) -> None:
            await send(message)
            if message["type"] == "http.response.start":
                act()
        await app(scope, receive, sending)
    return wrapped
