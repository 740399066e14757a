"""The body of a platform file fetched over HTTP (a link of another server, or our own file server seen from
another host): streamed in chunks, its failures worded, and its read in flight ended from another thread
when the action stops (:mod:`…kernel.aborts`)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx

from connector_ops.kernel.aborts import shut
from connector_ops.kernel.errors import NotFound, UpstreamError
from connector_ops.kernel.streams import ChunkStream

CHUNK = 1 << 20
#: statuses of a remote link worth fetching again later (rate limit, the server's own failures)
RETRYABLE_HTTP = frozenset({408, 429, 500, 502, 503, 504})


def body_of(response: httpx.Response, link: str, missing: str, host: str) -> HttpBody:
    """The streamed body of a file's response from ``host``; a 404 is ``NotFound(missing)``, another error
    status an ``UpstreamError`` (retryable when the server may answer later)."""
    if response.status_code == 404:
        raise NotFound(missing)
    if response.status_code >= 400:
        raise UpstreamError(f"fetching {link} failed with HTTP {response.status_code}",
                            retryable=response.status_code in RETRYABLE_HTTP)
    return HttpBody(response, link, host)


class HttpBody(io.BufferedReader):
    """A response's body, read in chunks; :meth:`abort` ends a read in flight from another thread."""

    def __init__(self, response: httpx.Response, link: str, host: str) -> None:
        super().__init__(ChunkStream(_received(response, link, host)), CHUNK)
        self._response = response

    @property
    def length(self) -> int | None:
        """The body's length as the server announced it, when the bytes read are those it counted (no
        ``Content-Encoding``, which the client decodes)."""
        headers = self._response.headers
        announced = headers.get("content-length", "")
        return int(announced) if announced.isdigit() and "content-encoding" not in headers else None

    def abort(self) -> None:
        """A read waiting for the server, in any thread, ends now with an error (:func:`…aborts.shut`)."""
        stream = self._response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None and sock.fileno() >= 0:
            shut(sock.fileno())


def _received(response: httpx.Response, link: str, host: str) -> Iterator[bytes]:
    """The body's chunks. The body failing half way (the server silent past the read time-out, the
    connection reset, the body cut short of its length) is an ``UpstreamError`` that names the link and how
    far it got, retryable (a ``GET``), not the HTTP client's error, which the action would report as a 500
    nobody anticipated."""
    try:
        yield from response.iter_bytes(CHUNK)
    except httpx.TimeoutException:
        waited = response.request.extensions.get("timeout", {}).get("read") or 0
        raise UpstreamError(f"fetching {link} failed: {host} sent nothing for {waited:g} s, after "
                            f"{response.num_bytes_downloaded:,} bytes", retryable=True) from None
    except httpx.TransportError as exc:
        raise UpstreamError(f"fetching {link} failed: the connection to {host} broke after "
                            f"{response.num_bytes_downloaded:,} bytes ({type(exc).__name__}: {exc})",
                            retryable=True) from None
