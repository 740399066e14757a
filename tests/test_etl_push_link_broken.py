"""A Push of a link whose server fails half way through the body: it goes silent, or it closes the connection
before the length it announced.
- A server that serves ranges of the file (``Accept-Ranges: bytes``, an ``ETag``) is asked for the rest
  where the body broke, and the Push gets every row; a server that answers that with the whole file (it
  changed) or breaks again and again fails the Push.
- Otherwise the Push fails with a retryable error that names the link, the host and how far the body got
  (not the HTTP client's own error, a 500 nobody anticipated), and the link is not fetched again.
- Stopped while it waits (a Ctrl-C; here the test's own signal), it ends at once instead of waiting out the
  read time-out.
A failed Push keeps nothing: no virtual file, no row table, no spooled copy, and the store takes the next.

The server is a loopback socket that answers with the whole file's ``Content-Length`` and sends three
quarters of it: more than Arrow's read-ahead and the kernel's buffers hold, so the Push is under way."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
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
from connector_ops.frames import pull_frame
from connector_ops.kernel.errors import ConnectorError
from connector_ops.resources import http_bodies
from connector_ops.resources.retry import Backoff
from tests.signals import Stop
from tests.store_activity import orphans
from tests.test_etl_push_pull import push, rows

ROWS = 150_000
TABLE = pa.table({"a": [str(i) for i in range(ROWS)], "b": ["x" * 60] * ROWS})
#: the store's read time-out for a link, shortened for the test; 1 s once timed out in CI before a response
#: from this file's server, a thread of the loaded test process, came
READ_TIMEOUT = 3.0
#: a trickling server's pause between bytes, and a slow but steady one's between eighths of the file
TRICKLE, PACE = 0.1, 0.4


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
    """HTTP on 127.0.0.1 that answers its requests in turn as ``answers`` says, each of the bytes asked for
    (the whole ``body``, or a ``Range: bytes=N-`` of it when it serves ranges): ``"cut"`` sends three quarters
    and closes the connection, ``"silent"`` sends three quarters and then nothing until ``close()``,
    ``"trickle"`` sends three quarters and then a byte every :data:`TRICKLE` s, ``"paced"`` sends all in eighths
    :data:`PACE` s apart, ``"whole"`` sends them all, ``"changed"`` answers a range with the whole body (``200``),
    ``"renamed"``
    sends the range asked for as another version (``ETag: "v2"``, as a server that ignores ``If-Range``).
    With ``ranges`` it says so (``Accept-Ranges: bytes``) and names the version (``ETag: "v1"``).
    ``stalled`` is set once a silent answer has sent its part; ``requests`` holds each request's headers,
    lower-cased."""

    def __init__(self, body: bytes, answers: list[str], *, ranges: bool = False) -> None:
        self._body, self._answers, self._ranges = body, list(answers), ranges
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self.stalled, self._closed = threading.Event(), threading.Event()
        self.requests: list[dict[str, str]] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self._answers and not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._answered, args=(conn, self._answers.pop(0)), daemon=True).start()

    def _answered(self, conn: socket.socket, answer: str) -> None:
        with conn, contextlib.suppress(OSError):  # the client may close first
            self._answer(conn, answer)

    def _answer(self, conn: socket.socket, answer: str) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(65536)
        lines = request.split(b"\r\n\r\n")[0].decode().split("\r\n")[1:]
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
        self.requests.append(headers)
        start = int(headers["range"].removeprefix("bytes=").rstrip("-")) if "range" in headers else 0
        if answer == "changed":  # If-Range honoured: the whole file
            start = 0
        status = b"206 Partial Content" if start else b"200 OK"
        head = [b"HTTP/1.1 " + status, b"Content-Length: %d" % (len(self._body) - start)]
        if start:
            head.append(b"Content-Range: bytes %d-%d/%d" % (start, len(self._body) - 1, len(self._body)))
        if self._ranges:  # "renamed": If-Range ignored, the range of a file changed since
            head += [b"Accept-Ranges: bytes", b'ETag: "v2"' if answer == "renamed" else b'ETag: "v1"']
        conn.sendall(b"\r\n".join(head) + b"\r\n\r\n")
        part = self._body[start:]
        if answer == "paced":  # slow but steady: eighths, PACE s apart
            for at in range(0, len(part), len(part) // 8 + 1):
                conn.sendall(part[at:at + len(part) // 8 + 1])
                self._closed.wait(PACE)
            return
        conn.sendall(part if answer in ("whole", "changed", "renamed") else part[:len(part) * 3 // 4])
        if answer == "silent":
            self.stalled.set()
            self._closed.wait(60)
        if answer == "trickle":  # a byte each TRICKLE s: never silent for a read time-out, days from done
            for byte in part[len(part) * 3 // 4:][:int(15 / TRICKLE)]:  # cut after 15 s: a test without a floor ends
                if self._closed.wait(TRICKLE):
                    return
                conn.sendall(bytes([byte]))

    def close(self) -> None:
        self._closed.set()
        self._thread.join(10)
        self._listener.close()


@pytest.fixture
def breaking(env: dict[str, str]) -> Iterator[Any]:
    """``breaking(kind, answers, ranges=…)``: (resources whose links may reach a :class:`BreakingServer`, the
    server, its file's descriptor); the store reads links with a ``READ_TIMEOUT`` read time-out. A server
    answers only the requests it has answers for: a Push that fetched the link once more would fail
    differently ("cannot reach")."""
    servers: list[BreakingServer] = []

    def start(kind: str, answers: list[str], *, ranges: bool = False) -> tuple[dict[str, Any], BreakingServer,
                                                                               dict[str, Any]]:
        servers.append(server := BreakingServer(BODIES[kind], answers, ranges=ranges))
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
    resources, server, pf = breaking(kind, ["cut" if cut else "silent"])
    caplog.set_level(logging.DEBUG, logger="connector_ops")
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf}, resources)
    assert not [r.message for r in caplog.records if "gave up" in r.message]
    sent = len(BODIES[kind]) * 3 // 4
    host = f"127.0.0.1:{server.port}"
    says = (f"the connection to {host} broke after {sent:,} bytes (RemoteProtocolError: peer closed connection "
            f"without sending complete message body (received {sent} bytes, expected {len(BODIES[kind])}))"
            if cut else f"{host} sent nothing for {READ_TIMEOUT:g} s, after {sent:,} bytes")
    assert (info.value.status, info.value.retryable) == (500, True)
    assert info.value.body == {"message": f"fetching {pf['link']} failed: {says}"}
    _nothing_kept(env, files, before, listed)


@pytest.mark.parametrize("kind", KINDS)
def test_a_push_stopped_while_its_link_is_silent_ends_at_once(env, files, breaking, signalled_after, kind):
    before, listed = _state(env, files)
    resources, server, pf = breaking(kind, ["silent"])
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


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Continuations after a break wait milliseconds, not seconds."""
    monkeypatch.setattr(http_bodies, "BACKOFF", Backoff(base_s=0.01, max_s=0.01, attempts=http_bodies.RESUMES))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("broken", ["cut", "silent"])
def test_a_link_whose_server_serves_ranges_is_continued_where_it_broke(env, files, breaking, quick_backoff,
                                                                        kind, broken):
    resources, server, pf = breaking(kind, [broken, "whole"], ranges=True)
    vf = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    sent = len(BODIES[kind]) * 3 // 4
    assert [(r.get("range"), r.get("if-range")) for r in server.requests] == [(None, None),
                                                                              (f"bytes={sent}-", '"v1"')]
    assert pull_frame(vf, kind="pyarrow").equals(pull_frame(push(files, BODIES[kind], f"here.{kind}", TYPES[kind]),
                                                            kind="pyarrow"))


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_link_that_changed_or_breaks_again_and_again_fails_naming_it(env, files, breaking, quick_backoff, kind):
    before, listed = _state(env, files)
    body = BODIES[kind]
    for answers, says in (
        (["cut", "changed"], f"broke after {len(body) * 3 // 4:,} bytes, and the file changed on the server "
                             f"meanwhile"),
        (["cut", "renamed"], "and the file changed on the server meanwhile"),
        (["cut"] * (1 + http_bodies.RESUMES), "times continued (RemoteProtocolError: peer closed connection"),
    ):
        resources, server, pf = breaking(kind, answers, ranges=True)
        with pytest.raises(ConnectorError) as info:
            invoke("etl.push", {"platformFile": pf}, resources)
        assert (info.value.status, info.value.retryable) == (500, True)
        assert says in info.value.body["message"] and pf["link"] in info.value.body["message"]
        assert len(server.requests) == len(answers)
    assert f"{http_bodies.RESUMES} times continued" in info.value.body["message"]
    _nothing_kept(env, files, before, listed)


def test_a_links_credentials_and_query_stay_out_of_its_errors(env, files, breaking):
    """A signed URL's signature or a password in the link is a secret: the error names scheme, host and path."""
    resources, server, pf = breaking("csv", ["cut"])
    secret = {**pf, "link": pf["link"].replace("http://", "http://user:pa55word@") + "?X-Amz-Signature=s3cr3t"}
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": secret}, resources)
    assert info.value.body["message"].startswith(f"fetching {pf['link']}?… failed: the connection to ")
    refused = {**secret, "link": secret["link"].replace(f"127.0.0.1:{server.port}", "127.0.0.2")}
    with pytest.raises(ConnectorError) as info_refused:  # loopback not allowed: refused before any connection
        invoke("etl.push", {"platformFile": refused}, resources)
    for message in (str(info.value), str(info_refused.value)):
        assert "pa55word" not in message and "s3cr3t" not in message and "user" not in message
    assert info_refused.value.status == 400


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_link_that_trickles_fails_naming_how_little_came(env, files, breaking, kind):
    """A byte every 0.1 s is never silent for a read time-out: without a floor on progress a byte every 59 s
    held a Push for days. Fewer than FLOOR bytes in a read time-out's worth of waiting is a retryable 500
    like a silent server's, within two read time-outs of the stall."""
    before, listed = _state(env, files)
    resources, server, pf = breaking(kind, ["trickle"])
    resources["platform_files"] = resources["platform_files"].model_copy(update={"http_timeout_s": 1.0})
    started = time.monotonic()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": pf}, resources)
    took = time.monotonic() - started
    assert (info.value.status, info.value.retryable) == (500, True)
    sent = len(BODIES[kind]) * 3 // 4
    message = info.value.body["message"]
    assert re.fullmatch(rf"fetching {re.escape(pf['link'])} failed: 127\.0\.0\.1:{server.port} sent only \d+ bytes in "
                        r"the last 1(\.\d+)? s \(a download needs 65,536 bytes per read time-out, 1 s\), after "
                        r"[\d,]+ bytes", message), message
    assert sent < int(re.findall(r"after ([\d,]+) bytes", message)[0].replace(",", "")) < sent + 30
    assert took < 8, f"took {took:.1f} s"
    _nothing_kept(env, files, before, listed)


def test_a_link_that_trickles_is_continued_where_the_server_serves_ranges(env, files, breaking, quick_backoff):
    resources, server, pf = breaking("csv", ["trickle", "whole"], ranges=True)
    resources["platform_files"] = resources["platform_files"].model_copy(update={"http_timeout_s": 1.0})
    started = time.monotonic()
    vf = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    assert time.monotonic() - started < 8  # not when the trickle ends (15 s)
    assert server.requests[1]["range"].startswith("bytes=") and len(server.requests) == 2
    assert pull_frame(vf, kind="pyarrow").equals(pull_frame(push(files, BODIES["csv"], "here.csv", "text/csv"),
                                                            kind="pyarrow"))


def test_a_slow_but_steady_link_is_read_to_its_end(env, files, breaking):
    """The bound is on progress, not on the whole transfer: 3 s for a file with a 1 s read time-out."""
    resources, _, pf = breaking("csv", ["paced"])
    resources["platform_files"] = resources["platform_files"].model_copy(update={"http_timeout_s": 1.0})
    started = time.monotonic()
    vf = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    assert time.monotonic() - started > 2.5
    assert pull_frame(vf, kind="pyarrow").num_rows == ROWS
