"""Sending a platform file's bytes to Drive: multipart for small files, a resumable session otherwise.

Resumable protocol (research §2): initiate a session (``POST …?uploadType=resumable`` → ``Location``), then
``PUT`` the bytes with ``Content-Range``; ``308`` + ``Range: bytes=0-N`` means resume at ``N+1``. After a
dropped connection, a timeout, a 429 or a 5xx we ask the session where it stands
(``Content-Range: bytes */total``) and go on from there.

Two senders, chosen by the source:

* :class:`StreamingSender` — a seekable source of known size (a platform file on our own server is a local
  file) goes out in ONE ``PUT`` of everything not yet persisted (``bytes X-(N-1)/N``, research §2 2a/2b).
  Client and server never take turns waiting for a per-chunk ``308``; after an interruption the source is
  re-read from the offset the session reports, so nothing needs to be held in memory.
* :class:`ChunkedSender` — a source that cannot seek (a link to another server, possibly of unknown size)
  goes out in chunks of a multiple of 256 KiB, each held in memory until the session confirms it, so an
  interrupted chunk can be sent again. If the session went back further than that chunk (or expired,
  404/410) the upload restarts when the stream can seek, and fails cleanly otherwise.

Both compute the MD5 of the bytes on the way (in a helper thread: hashlib releases the GIL) for the
caller to compare with Drive's ``md5Checksum``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

import httpx

from connector_ops.kernel.errors import ActionFailed, UpstreamError
from connector_ops.kernel.progress import Reporter
from connector_ops.resources.drive.google_http import DriveHttp, is_retryable, parse_error

QUANTUM = 256 * 1024
SLICE = 1 << 20
#: slices waiting to be hashed at most (bounds the memory the hashing thread can hold)
HASH_BACKLOG = 4


class SessionLost(Exception):
    """The upload session is gone (404/410) or behind the bytes we still hold."""


def read_up_to(stream: IO[bytes], n: int) -> bytes:
    """Exactly ``n`` bytes unless the stream ends first (``read`` may return short counts)."""
    parts, got = [], 0
    while got < n:
        data = stream.read(n - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def seekable_size(stream: IO[bytes]) -> int | None:
    """Bytes from the start to the end of a seekable stream (left at its start); ``None`` if it cannot seek."""
    try:
        if not stream.seekable():
            return None
        size = stream.seek(0, 2)
        stream.seek(0)
        return size
    except OSError:
        return None


def multipart_related(metadata: Mapping[str, Any], data: bytes, content_type: str) -> tuple[bytes, str]:
    """The ``multipart/related`` body of ``uploadType=multipart``: JSON metadata, then the media."""
    boundary = "connector_ops_" + uuid.uuid4().hex
    while boundary.encode() in data:  # pragma: no cover - 128 random bits
        boundary = "connector_ops_" + uuid.uuid4().hex
    head = (
        f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
        f"{json.dumps(metadata)}\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n"
    ).encode()
    return head + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/related; boundary={boundary}"


def _next_offset(response: httpx.Response) -> int:
    """``Range: bytes=0-N`` -> N+1; no header -> nothing persisted."""
    header = response.headers.get("range")
    if not header:
        return 0
    return int(header.rsplit("-", 1)[1]) + 1


class _Md5:
    """MD5 of the bytes in the order given, computed in one helper thread beside the network I/O."""

    def __init__(self) -> None:
        self._md5 = hashlib.md5(usedforsecurity=False)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="upload-md5")
        self._pending: deque[Future[None]] = deque()

    def add(self, data: bytes) -> None:
        while len(self._pending) >= HASH_BACKLOG:  # memory stays bounded if hashing falls behind
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(self._md5.update, data))

    def settle(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def hexdigest(self) -> str:
        self.settle()
        self._pool.shutdown()
        return self._md5.hexdigest()

    def abandon(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _SessionSender:
    """What both senders share: PUTs to one session URI with the bearer token, status queries after an
    interruption (with backoff and a cap), and reading the session's answers."""

    def __init__(self, http: DriveHttp, session_uri: str, content_type: str, reporter: Reporter) -> None:
        self.http, self.uri, self.content_type, self.reporter = http, session_uri, content_type, reporter
        self.md5 = _Md5()
        self.failures = 0

    def hexdigest(self) -> str:
        """MD5 of every byte read from the stream (waits for the hashing to finish)."""
        return self.md5.hexdigest()

    def send(self, stream: IO[bytes], *args: Any) -> dict[str, Any]:
        """Upload the stream (see each sender's ``_send_all``); returns the File resource. On failure
        the hashing thread is stopped at once."""
        try:
            return self._send_all(stream, *args)
        except BaseException:
            self.md5.abandon()
            raise

    def _send_all(self, stream: IO[bytes], *args: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _request(self, body: Iterable[bytes] | bytes, length: int, content_range: str,
                 content_type: bool = True) -> tuple[httpx.Response | None, str]:
        """One PUT with an explicit Content-Length (the body is streamed, never copied whole); ``None``
        when the connection failed."""
        token = self.http.tokens.token()
        headers = {"Content-Range": content_range, "Content-Length": str(length), "Authorization": f"Bearer {token}"}
        if content_type:
            headers["Content-Type"] = self.content_type
        try:
            return self.http.client.put(self.uri, content=body, headers=headers), token
        except httpx.TransportError:
            return None, token

    def _status(self, total: str) -> httpx.Response | None:
        """Where does the session stand? (``Content-Range: bytes */total``), refreshing the token once."""
        for refreshed in (False, True):
            response, token = self._request(b"", 0, f"bytes */{total}", content_type=False)
            if response is None or response.status_code != 401 or refreshed:
                return response
            self.http.tokens.invalidate(token)
        raise AssertionError("unreachable")  # pragma: no cover

    def _put(self, body: Iterable[bytes], length: int, content_range: str, total: str,
             sent_from: int) -> tuple[dict[str, Any] | None, int]:
        """PUT bytes and read the answer (see :meth:`_answer`). On a 401 the token is refreshed and the
        session asked where it stands, so bytes are never re-sent blindly: the caller resumes from there."""
        response, token = self._request(body, length, content_range)
        recovered = False
        if response is not None and response.status_code == 401:
            self.http.tokens.invalidate(token)
            response, recovered = self._status(total), True
        return self._answer(response, total, sent_from, recovered)

    def _wait_or_give_up(self, response: httpx.Response | None = None) -> None:
        """Back off before the next try; give up once the attempts are spent."""
        if self.failures + 1 >= self.http.backoff.attempts:
            raise UpstreamError("the resumable upload kept failing; giving up", status=503, retryable=True)
        self.http.backoff.wait(self.failures, response)
        self.failures += 1

    def _answer(self, response: httpx.Response | None, total: str, sent_from: int,
                recovered: bool) -> tuple[dict[str, Any] | None, int]:
        """(the File when the upload is complete, else the offset to go on from). A lost connection
        (``None``) or a retryable status is followed by waiting and asking the session where it stands.
        Progress resets the failure count; a PUT answered 308 without progress counts as a failure."""
        while response is None or is_retryable(response):
            self._wait_or_give_up(response)
            response, recovered = self._status(total), True
        status = response.status_code
        if status in (200, 201):
            return response.json(), 0
        if status == 308:
            location = response.headers.get("location")
            if location:
                self.uri = location
            offset = _next_offset(response)
            if offset > sent_from:
                self.failures = 0
            elif not recovered:
                self._wait_or_give_up()
            return None, offset
        if status in (404, 410):
            raise SessionLost("upload session expired")
        raise parse_error(response, "upload the file")


class StreamingSender(_SessionSender):
    """Sends a seekable stream of known size in one PUT; after an interruption, re-reads it from the offset
    the session reports. Holds at most a few 1 MiB slices in memory."""

    def _send_all(self, stream: IO[bytes], total: int) -> dict[str, Any]:
        """The ``total`` bytes of ``stream``, from its start."""
        self._hashed = 0  # bytes read (and so hashed and reported) for the first time, from the start
        offset = 0
        while True:
            body = self._body(stream, offset, total)
            done, offset = self._put(body, total - offset, f"bytes {offset}-{total - 1}/{total}", str(total), offset)
            if done is not None:
                self._hash_until(stream, total)  # a no-op unless the server got ahead of what we read
                return done

    def _hash_until(self, stream: IO[bytes], end: int) -> None:
        """Hash the bytes between what was read so far and ``end`` (the digest must cover every byte)."""
        if self._hashed < end:
            stream.seek(self._hashed)
            for _ in self._slices(stream, self._hashed, end):
                pass

    def _body(self, stream: IO[bytes], offset: int, total: int) -> Iterator[bytes]:
        self._hash_until(stream, offset)
        stream.seek(offset)
        return self._slices(stream, offset, total)

    def _slices(self, stream: IO[bytes], position: int, end: int) -> Iterator[bytes]:
        """1 MiB reads from ``position`` to ``end``; bytes read for the first time are hashed and reported."""
        while position < end:
            data = stream.read(min(SLICE, end - position))
            if not data:
                raise ActionFailed("the file got shorter while it was being uploaded; nothing was created")
            if position + len(data) > self._hashed:
                fresh = data[self._hashed - position:] if position < self._hashed else data
                self.md5.add(fresh)
                self._hashed += len(fresh)
                self.reporter.update(len(fresh))
            position += len(data)
            yield data


class ChunkedSender(_SessionSender):
    """PUTs a stream that cannot seek to one resumable session, chunk by chunk, surviving interruptions."""

    def __init__(self, http: DriveHttp, session_uri: str, chunk_size: int, content_type: str,
                 reporter: Reporter) -> None:
        if chunk_size <= 0 or chunk_size % QUANTUM:
            raise ValueError("chunk size must be a positive multiple of 256 KiB")
        super().__init__(http, session_uri, content_type, reporter)
        self.chunk_size = chunk_size

    def _send_all(self, stream: IO[bytes], first: bytes = b"") -> dict[str, Any]:
        """``first`` followed by the rest of ``stream``."""
        buffer = bytearray(first)
        self.md5.add(first)
        buffer_start = 0  # stream offset of buffer[0]
        offset = 0        # first byte the session has not persisted
        eof = False
        while True:
            if offset < buffer_start or offset > buffer_start + len(buffer):
                raise SessionLost(f"session resumed at byte {offset}, outside the bytes held in memory")
            del buffer[: offset - buffer_start]
            buffer_start = offset
            self.md5.settle()  # at most one chunk waits for hashing: memory stays bounded
            # read one byte past the chunk so the last chunk is known to be last (it must state the total)
            while len(buffer) <= self.chunk_size and not eof:
                data = stream.read(self.chunk_size + 1 - len(buffer))
                if not data:
                    eof = True
                    break
                buffer += data
                self.md5.add(data)
            size = min(len(buffer), self.chunk_size)
            final = eof and len(buffer) <= self.chunk_size
            total = str(buffer_start + len(buffer)) if final else "*"
            content_range = f"bytes {offset}-{offset + size - 1}/{total}" if size else f"bytes */{total}"
            with memoryview(buffer) as whole, whole[:size] as view:  # released before the buffer is resized
                slices = (bytes(view[i:i + SLICE]) for i in range(0, size, SLICE))
                done, new_offset = self._put(slices, size, content_range, total, offset)
            if done is not None:
                self.reporter.update(buffer_start + len(buffer) - offset)
                return done
            self.reporter.update(max(0, new_offset - offset))
            offset = new_offset


def check_md5(file: Mapping[str, Any], expected: str) -> None:
    got = file.get("md5Checksum")
    if got and got != expected:
        raise ActionFailed(f"upload verification failed: Drive stored MD5 {got}, the bytes sent have MD5 {expected}")
