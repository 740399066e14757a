"""The body of a platform file fetched over HTTP (a link of another server, or our own file server seen from
another host): streamed in chunks, continued where it broke off, its failures worded, and its read in
flight ended from another thread when the action stops (:mod:`…kernel.aborts`).

A connection that breaks half way through a large file (a reset, a server restarted, a body cut short of
its length, a server silent past the read time-out) need not cost the bytes already read: when the server
said it serves ranges of this file (``Accept-Ranges: bytes``) and named its version (a strong ``ETag``, or
``Last-Modified``), the body goes on with ``Range: bytes=<read>-`` and ``If-Range`` naming that version, as
the Drive download does. A server that answers with the whole file instead (``200``: it changed since) or
with another range fails the read; so do more than :data:`RESUMES` breaks.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator, Mapping

import httpx

from connector_ops.kernel.aborts import shut
from connector_ops.kernel.errors import NotFound, UpstreamError
from connector_ops.kernel.streams import ChunkStream
from connector_ops.resources.progress_floor import Stalled, progressing, read_timeout
from connector_ops.resources.retry import Backoff

CHUNK = 1 << 20
#: statuses of a remote link worth fetching again later (rate limit, the server's own failures)
RETRYABLE_HTTP = frozenset({408, 429, 500, 502, 503, 504})
#: times a body is continued after its connection broke, before the read fails
RESUMES = 3
#: the wait before each continuation (jittered, doubling): a server restarting gets a few seconds
BACKOFF = Backoff(base_s=0.5, max_s=4.0, attempts=RESUMES)

#: the same request again with these headers added, its response streamed
Resend = Callable[[Mapping[str, str]], httpx.Response]


def body_of(response: httpx.Response, link: str, missing: str, host: str, resend: Resend | None = None) -> HttpBody:
    """The streamed body of a file's response from ``host``; a 404 is ``NotFound(missing)``, another error
    status an ``UpstreamError`` (retryable when the server may answer later). ``resend`` continues it after a
    break, where the server allows."""
    if response.status_code == 404:
        raise NotFound(missing)
    if response.status_code >= 400:
        raise UpstreamError(f"fetching {link} failed with HTTP {response.status_code}",
                            retryable=response.status_code in RETRYABLE_HTTP)
    return HttpBody(response, link, host, resend)


def _version(response: httpx.Response) -> str | None:
    """What ``If-Range`` may name for a continuation of this response, if it can be continued at all."""
    headers = response.headers
    if headers.get("accept-ranges", "").strip().lower() != "bytes" or "content-encoding" in headers:
        return None
    etag = headers.get("etag", "")
    if etag.startswith('"'):  # a strong validator (a weak one, W/"…", may not be used with If-Range)
        return etag
    return headers.get("last-modified") or None


class HttpBody(io.BufferedReader):
    """A response's body, read in chunks and continued after a break; :meth:`abort` ends a read in flight
    from another thread."""

    def __init__(self, response: httpx.Response, link: str, host: str, resend: Resend | None = None) -> None:
        super().__init__(ChunkStream(self._chunks()), CHUNK)
        self._first, self._current = response, response
        self._continued: list[httpx.Response] = []  # the responses that continued the body after a break
        self._link, self._host, self._resend = link, host, resend
        self._stopped = threading.Event()

    @property
    def length(self) -> int | None:
        """The body's length as the server announced it, when the bytes read are those it counted (no
        ``Content-Encoding``, which the client decodes)."""
        headers = self._first.headers
        announced = headers.get("content-length", "")
        return int(announced) if announced.isdigit() and "content-encoding" not in headers else None

    def abort(self) -> None:
        """A read waiting for the server, in any thread, ends now with an error (:func:`…aborts.shut`), and
        the body is not continued."""
        self._stopped.set()
        for response in (self._first, *self._continued):  # the one read now, whichever it is
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None and sock.fileno() >= 0:
                shut(sock.fileno())

    def close(self) -> None:
        try:
            super().close()
        finally:
            for response in self._continued:
                response.close()

    def _chunks(self) -> Iterator[bytes]:
        """The body's chunks; after a break, the chunks of its continuation. A failure is an
        ``UpstreamError`` that names the link and how far it got, retryable (a ``GET``), not the HTTP
        client's error, which the action would report as a 500 nobody anticipated."""
        read, breaks = 0, 0
        while True:
            try:
                # as they come (``read`` is what was received), at least FLOOR bytes per read time-out waited
                for chunk in progressing(self._current.iter_bytes(), read_timeout(self._current)):
                    read += len(chunk)
                    yield chunk
                return
            except (httpx.TransportError, Stalled) as exc:  # a server that hardly sends is one that broke off
                if isinstance(exc, Stalled):
                    self._current.close()  # its connection still open: not left to trickle meanwhile
                version = _version(self._first) if self._resend is not None else None
                if version is None or breaks >= RESUMES or self._stopped.is_set():
                    raise self._failure(exc, read, breaks) from None
            while True:  # continue after the bytes read, once the server answers
                breaks += 1
                if self._stopped.wait(BACKOFF.delay(breaks - 1, None)):
                    raise UpstreamError(f"fetching {self._link} stopped after {read:,} bytes") from None
                try:
                    self._current = self._continuation(read, version)
                    break
                except httpx.TransportError as exc:
                    if breaks >= RESUMES:
                        raise self._failure(exc, read, breaks) from None

    def _continuation(self, read: int, version: str) -> httpx.Response:
        assert self._resend is not None
        response = self._resend({"Range": f"bytes={read}-", "If-Range": version})
        self._continued.append(response)
        if self._stopped.is_set():  # aborted meanwhile, perhaps before this response was listed to be shut
            raise UpstreamError(f"fetching {self._link} stopped after {read:,} bytes")
        given = response.headers.get("content-range", "")
        named = response.headers.get("etag" if version.startswith('"') else "last-modified")
        if response.status_code != 206 or not given.startswith(f"bytes {read}-") or named not in (None, version):
            changed = response.status_code == 200 or named not in (None, version)  # If-Range ignored: caught here
            raise UpstreamError(self._broke(read) + ", and " + ("the file changed on the server meanwhile" if changed
                                else f"the server did not continue it (HTTP {response.status_code} {given})"),
                                retryable=True)
        return response

    def _failure(self, exc: httpx.TransportError | Stalled, read: int, breaks: int) -> UpstreamError:
        tries = f", {breaks} times continued" if breaks else ""
        if isinstance(exc, Stalled):
            return UpstreamError(f"fetching {self._link} failed: {self._host} {exc.words()}, after {read:,} "
                                 f"bytes{tries}", retryable=True)
        if isinstance(exc, httpx.TimeoutException):
            waited = read_timeout(self._current) or 0
            return UpstreamError(f"fetching {self._link} failed: {self._host} sent nothing for {waited:g} s, "
                                 f"after {read:,} bytes{tries}", retryable=True)
        return UpstreamError(f"{self._broke(read)}{tries} ({type(exc).__name__}: {exc})", retryable=True)

    def _broke(self, read: int) -> str:
        return f"fetching {self._link} failed: the connection to {self._host} broke after {read:,} bytes"
