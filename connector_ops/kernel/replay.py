"""One fetch of a stream that an action may read more than once.

A Push may read its file twice or three times: a probe of its first block, then the load; the row reader
again after the columnar path gave up on a line, to word the error; every key listed, then the load again.
A file from storage is opened again for nothing. A link is another ``GET`` each time: the whole file over the
network again, and the bytes a server sends the second time need not be those it sent the first (a report
made on request). :class:`Replay` fetches once: the first read streams the source, keeping what it reads in
a temporary file; a later read takes what was kept from that file, then goes on from the source where the
reads before it stopped. Memory stays one buffer; the disk holds as much of the file as was read.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import threading
from collections.abc import Iterator
from typing import IO

from connector_ops.kernel.disk import temp_floor
from connector_ops.kernel.streams import Open


class Replay:
    """Reads of ``source`` (a binary stream read once, from its start) that each start at its first byte.
    ``open()`` gives a new read; ``close()`` drops the kept bytes (the source is its opener's to close)."""

    def __init__(self, source: IO[bytes], chunk: int = 1 << 20) -> None:
        self._source, self._chunk = source, chunk
        self._floor = temp_floor()  # the kept bytes grow TMPDIR as the source is read
        self._kept = tempfile.TemporaryFile(prefix="connector-ops-fetched-")  # noqa: SIM115 (closed by close())
        self._fetched = 0  # bytes of the source read, all of them kept
        self._ended = False
        self._failed: Exception | None = None
        self._lock = threading.Lock()  # Arrow may read in a thread of its own

    @contextlib.contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        """A new read from the first byte. An interrupt (Ctrl-C, Dagster's Terminate) leaving it first ends
        the source's read in flight in another thread (Arrow's), if any, which would otherwise hold the
        read's lock, and the stop, until the network answered. Another failure leaves the source be: a
        retry reads on."""
        with io.BufferedReader(_Read(self), self._chunk) as read:
            try:
                yield read
            except Exception:
                raise
            except BaseException:
                self.abort()
                raise

    @property
    def length(self) -> int | None:
        """The source's length in bytes, if it knows it (its ``length``: an HTTP body's ``Content-Length``)."""
        return getattr(self._source, "length", None)

    def abort(self) -> None:
        """End the source's read in flight, if it can (its ``abort()``): nothing will read it again."""
        getattr(self._source, "abort", lambda: None)()

    def close(self) -> None:
        with self._lock:  # after a read in flight (another thread's) has written what it read
            self._kept.close()

    def read_at(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``: kept ones, else the source's next (kept as they come)."""
        with self._lock:
            if position < self._fetched:
                return os.pread(self._kept.fileno(), min(size, self._fetched - position), position)
            if self._failed is not None:  # a source that failed has no end: every read past what it gave fails
                raise self._failed
            if self._ended:
                return b""
            read = getattr(self._source, "read1", self._source.read)
            try:
                data = read(max(size, self._chunk))
            except Exception as exc:
                self._failed = exc
                raise
            if not data:
                self._ended = True
                return b""
            self._floor.wrote(len(data))
            os.pwrite(self._kept.fileno(), data, self._fetched)
            self._fetched += len(data)
            return data[:size]  # the rest is kept: the next read takes it from there


class _Read(io.RawIOBase):
    """One read of a :class:`Replay`, from its first byte."""

    def __init__(self, replay: Replay) -> None:
        self._replay, self._position = replay, 0

    def readable(self) -> bool:
        return True

    # override: callers pass a bytearray or memoryview, which it slices (typeshed: any buffer)
    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        data = self._replay.read_at(self._position, len(view))
        view[:len(data)] = data
        self._position += len(data)
        return len(data)


@contextlib.contextmanager
def fetched_once(opener: Open) -> Iterator[Replay]:
    """The :class:`Replay` of one of ``opener``'s streams, opened now. When the block fails, a read of the
    source still in flight in another thread is ended first, so that dropping what was kept need not wait
    for the network."""
    with opener() as source:
        replay = Replay(source)
        try:
            yield replay
        except BaseException:
            replay.abort()
            raise
        finally:
            replay.close()
