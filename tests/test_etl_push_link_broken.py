"""A Push of a link whose server fails half way through the body: it goes silent, or it closes the connection
before the length it announced. The Push fails with a retryable error that names the link, the host and how
far the body got (not the HTTP client's own error, a 500 nobody anticipated), or, stopped while it waits (a
Ctrl-C; here the test's own signal), ends at once instead of waiting out the read time-out. Either way it
keeps nothing: no virtual file, no row table, no spooled copy, and the store takes the next Push.

The server is a loopback socket that answers with the whole file's ``Content-Length`` and sends three
quarters of it: more than Arrow's read-ahead and the kernel's buffers hold, so the Push is under way."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from connector_ops import invoke
from connector_ops.environment import resources_for
from connector_ops.kernel.errors import ConnectorError
from tests.signals import Stop
from tests.store_activity import orphans
from tests.test_etl_push_pull import push, rows

ROWS = 150_000
TABLE = pa.table({"a": [str(i) for i in range(ROWS)], "b": ["x" * 60] * ROWS})
READ_TIMEOUT = 1.0  # the store's read time-out for a link, shortened for the test


def _body(kind: str) -> bytes:
    out = io.BytesIO()
    if kind == "csv":
        pacsv.write_csv(TABLE, out)
    elif kind in ("ndjson", "json"):
        items = (f'{{"a": "{i}", "b": "{"x" * 60}"}}' for i in range(ROWS))
        out.write(("\n".join(items) if kind == "ndjson" else "[\n" + ",\n".join(items) + "\n]").encode())
    else:
        pq.write_table(TABLE, out, row_group_size=10_000)
    return out.getvalue()


KINDS = ["csv", "ndjson", "json", "parquet"]
BODIES = {kind: _body(kind) for kind in KINDS}
TYPES = {"csv": "text/csv", "ndjson": "application/x-ndjson", "json": "application/json",
         "parquet": "application/vnd.apache.parquet"}


class BreakingServer:
    """One HTTP response on 127.0.0.1: the headers of the whole ``body``, three quarters of it, then either
    silence until ``close()`` (``cut=False``) or the connection closed (``cut=True``). ``stalled`` is set
    once the three quarters are sent."""

    def __init__(self, body: bytes, *, cut: bool) -> None:
        self._body, self._cut = body, cut
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.stalled, self._closed = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn, contextlib.suppress(OSError):  # the client may close first
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(self._body))
            conn.sendall(self._body[:len(self._body) * 3 // 4])
            self.stalled.set()
            if not self._cut:
                self._closed.wait(60)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self._thread.join(10)


@pytest.fixture
def breaking(env: dict[str, str]) -> Iterator[Any]:
    """``breaking(kind, cut=…)``: (resources whose links may reach the server, the server, its file's
    descriptor); the store reads links with a ``READ_TIMEOUT`` read time-out. The server answers once: a
    Push that fetched the link again after the failure would fail differently ("cannot reach")."""
    servers: list[BreakingServer] = []

    def start(kind: str, *, cut: bool) -> tuple[dict[str, Any], BreakingServer, dict[str, str]]:
        servers.append(server := BreakingServer(BODIES[kind], cut=cut))
        resources = resources_for(environ={**env, "CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS": f"127.0.0.1:{server.port}"})
        resources["platform_files"] = resources["platform_files"].model_copy(update={"http_timeout_s": READ_TIMEOUT})
        link = f"http://127.0.0.1:{server.port}/exports/big.{kind}"
        return resources, server, {"name": f"big.{kind}", "contentType": TYPES[kind], "link": link,
                                   "size": len(BODIES[kind])}  # known: the columnar paths take it

    try:
        yield start
    finally:
        for server in servers:
            server.close()


def _nothing_kept(env: dict[str, str], files: Any, before: Any, listed: list[str]) -> None:
    assert resources_for(environ=env)["virtual_files"].inventory() == before
    assert orphans(env["CONNECTOR_OPS_DATABASE_URL"]) == set()
    assert sorted(p.name for p in files.root.iterdir()) == listed  # no spooled copy either
    assert rows(push(files, b"a,b\n1,2\n")) == [{"a": "1", "b": "2"}]


def _state(env: dict[str, str], files: Any) -> tuple[Any, list[str]]:
    return resources_for(environ=env)["virtual_files"].inventory(), sorted(p.name for p in files.root.iterdir())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cut", [False, True], ids=["silent", "cut"])
def test_a_link_that_fails_half_way_is_a_retryable_error_naming_it(env, files, breaking, caplog, kind, cut):
    """The columnar path does not hand the file to the row reader, which would read what was kept again,
    only to fail the same way."""
    before, listed = _state(env, files)
    resources, server, pf = breaking(kind, cut=cut)
    caplog.set_level(logging.DEBUG, logger="connector_ops")
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf}, resources)
    assert not [r.message for r in caplog.records if "gave up" in r.message]
    sent = len(BODIES[kind]) * 3 // 4
    host = f"127.0.0.1:{server.port}"
    says = (f"the connection to {host} broke after {sent:,} bytes (RemoteProtocolError: peer closed connection "
            f"without sending complete message body (received {sent} bytes, expected {len(BODIES[kind])}))"
            if cut else f"{host} sent nothing for 1 s, after {sent:,} bytes")
    assert (info.value.status, info.value.retryable) == (500, True)
    assert info.value.body == {"message": f"fetching {pf['link']} failed: {says}"}
    _nothing_kept(env, files, before, listed)


@pytest.mark.parametrize("kind", KINDS)
def test_a_push_stopped_while_its_link_is_silent_ends_at_once(env, files, breaking, signalled_after, kind):
    before, listed = _state(env, files)
    resources, server, pf = breaking(kind, cut=False)
    resources["platform_files"] = resources["platform_files"].model_copy(update={"http_timeout_s": 30.0})
    sent: list[float] = []

    def stop_when_stalled() -> None:
        if server.stalled.wait(30):
            time.sleep(0.5)  # the Push now waits for bytes that do not come
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGUSR1)

    threading.Thread(target=stop_when_stalled, daemon=True).start()
    with pytest.raises(Stop):
        invoke("etl.push", {"platformFile": pf}, resources)
    took = time.monotonic() - sent[0]
    assert took < 1.0, f"the stop took {took:.1f} s"
    _nothing_kept(env, files, before, listed)
