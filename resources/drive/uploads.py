"""Sending a platform file's bytes to Drive: multipart for small files, resumable chunks otherwise.

Resumable protocol (research §2): initiate a session (``POST …?uploadType=resumable`` → ``Location``), then
``PUT`` chunks of a multiple of 256 KiB with ``Content-Range``; ``308`` + ``Range: bytes=0-N`` means resume
at ``N+1`` (which may be inside the chunk just sent). After a dropped connection, a timeout, a 429 or a 5xx
we ask the session where it stands (``Content-Range: bytes */total``) and go on from there. Only the
current chunk is held in memory, so memory stays bounded whatever the file size; if the session went
back further than that chunk (or expired, 404/410) the upload restarts when the stream can seek, and fails
cleanly otherwise. The MD5 of the bytes is computed on the way for the caller to verify.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

import httpx

from connector_ops.errors import ActionFailed, UpstreamError
from connector_ops.progress import Reporter
from resources.drive.google_http import DriveHttp, is_retryable, parse_error

QUANTUM = 256 * 1024
SLICE = 1 << 20


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


class ResumableSender:
    """PUTs a stream to one resumable session, chunk by chunk, surviving interruptions."""

    def __init__(self, http: DriveHttp, session_uri: str, chunk_size: int, content_type: str,
                 reporter: Reporter) -> None:
        if chunk_size <= 0 or chunk_size % QUANTUM:
            raise ValueError("chunk size must be a positive multiple of 256 KiB")
        self.http, self.uri, self.chunk_size = http, session_uri, chunk_size
        self.content_type, self.reporter = content_type, reporter
        self._md5 = hashlib.md5(usedforsecurity=False)
        # hashing runs beside the network I/O (hashlib releases the GIL); one worker keeps the order
        self._hasher = ThreadPoolExecutor(1, thread_name_prefix="upload-md5")
        self._hashing: list[Future[None]] = []

    def _hash(self, data: bytes) -> None:
        self._hashing.append(self._hasher.submit(self._md5.update, data))

    def hexdigest(self) -> str:
        """MD5 of every byte read from the stream (waits for the hashing to finish)."""
        for future in self._hashing:
            future.result()
        self._hasher.shutdown()
        return self._md5.hexdigest()

    def send(self, stream: IO[bytes], first: bytes = b"") -> dict[str, Any]:
        """Upload ``first`` followed by the rest of ``stream``; returns the File resource."""
        try:
            return self._send_all(stream, first)
        except BaseException:
            self._hasher.shutdown(wait=False, cancel_futures=True)
            raise

    def _send_all(self, stream: IO[bytes], first: bytes) -> dict[str, Any]:
        buffer = bytearray(first)
        self._hash(first)
        buffer_start = 0  # stream offset of buffer[0]
        offset = 0        # first byte the session has not persisted
        eof = False
        failures = 0
        while True:
            if offset < buffer_start or offset > buffer_start + len(buffer):
                raise SessionLost(f"session resumed at byte {offset}, outside the bytes held in memory")
            del buffer[: offset - buffer_start]
            buffer_start = offset
            for future in self._hashing:  # at most one chunk waits for hashing: memory stays bounded
                future.result()
            self._hashing.clear()
            # read one byte past the chunk so the last chunk is known to be last (it must state the total)
            while len(buffer) <= self.chunk_size and not eof:
                data = stream.read(self.chunk_size + 1 - len(buffer))
                if not data:
                    eof = True
                    break
                buffer += data
                self._hash(data)
            size = min(len(buffer), self.chunk_size)
            final = eof and len(buffer) <= self.chunk_size
            total = str(buffer_start + len(buffer)) if final else "*"
            content_range = f"bytes {offset}-{offset + size - 1}/{total}" if size else f"bytes */{total}"
            with memoryview(buffer) as whole, whole[:size] as view:  # released before the buffer is resized
                response = self._put(view, content_range)
            if response is None or is_retryable(response):
                if failures + 1 >= self.http.backoff.attempts:
                    raise UpstreamError("the resumable upload kept failing; giving up", status=503)
                self.http.backoff.wait(failures, response)
                failures += 1
                response = self._status(total)
                if response is None:
                    continue  # still unreachable: query again after the next wait
            done = self._handle(response)
            if done is not None:
                self.reporter.update(buffer_start + len(buffer) - offset)
                return done
            new_offset = _next_offset(response)
            self.reporter.update(max(0, new_offset - offset))
            if new_offset > offset:
                failures = 0
            offset = new_offset

    def _handle(self, response: httpx.Response) -> dict[str, Any] | None:
        status = response.status_code
        if status in (200, 201):
            return response.json()
        if status == 308:
            location = response.headers.get("location")
            if location:
                self.uri = location
            return None
        if status in (404, 410):
            raise SessionLost("upload session expired")
        raise parse_error(response, "upload the file")

    def _put(self, body: memoryview, content_range: str) -> httpx.Response | None:
        headers = {"Content-Range": content_range, "Content-Type": self.content_type}
        return self._send(body, headers)

    def _status(self, total: str) -> httpx.Response | None:
        return self._send(memoryview(b""), {"Content-Range": f"bytes */{total}"})

    def _send(self, body: memoryview, headers: dict[str, str]) -> httpx.Response | None:
        """One PUT to the session with the bearer token; ``None`` when the connection failed.

        The chunk goes out in 1 MiB pieces with an explicit Content-Length, never copied whole."""
        for refreshed in (False, True):
            token = self.http.tokens.token()
            slices = (bytes(body[i:i + SLICE]) for i in range(0, len(body), SLICE))
            try:
                response = self.http.client.put(self.uri, content=slices, headers={
                    **headers, "Content-Length": str(len(body)), "Authorization": f"Bearer {token}"})
            except httpx.TransportError:
                return None
            if response.status_code != 401 or refreshed:
                return response
            self.http.tokens.invalidate(token)
        raise AssertionError("unreachable")  # pragma: no cover


def check_md5(file: Mapping[str, Any], expected: str) -> None:
    got = file.get("md5Checksum")
    if got and got != expected:
        raise ActionFailed(f"upload verification failed: Drive stored MD5 {got}, the bytes sent have MD5 {expected}")
