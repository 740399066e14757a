"""The least progress a download must make: :data:`FLOOR` bytes in every window of ``window_s`` seconds spent
waiting for its server.

An HTTP client's read time-out bounds one read only: a server that sends one byte just before each time-out
(a byte every 59 s against a 60 s time-out) kept a step, its pool slot and its Dagster step busy for days.
A total deadline would fail a big file on a slow but honest link, so the bound is on progress instead: a
body whose server sent fewer than ``FLOOR`` bytes in ``window_s`` seconds of waiting for it is
:class:`Stalled`, which its reader treats as a broken connection (continued where the server allows, else a
retryable error). Only the time spent waiting for the server counts: a reader that takes its time between
chunks (a database busy inserting the rows) is not the server's slowness. The check is made as chunks
arrive: a stall fails the body when the chunk after the one that closed its window arrives (or the read
time-out passes), within about three windows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import httpx

#: bytes a server must send in each window (64 KiB: about 1 KiB/s with the platform files' 60 s window)
FLOOR = 64 << 10


class Stalled(Exception):
    """The server sent ``received`` bytes in ``waited`` seconds of waiting, fewer than ``floor`` per ``window_s``."""

    def __init__(self, received: int, waited: float, window_s: float, floor: int) -> None:
        self.received, self.waited, self.window_s, self.floor = received, waited, window_s, floor
        super().__init__(self.words())

    def words(self) -> str:
        """``sent only 12 bytes in the last 61.2 s (a download needs 65,536 bytes per read time-out, 60 s)``."""
        return (f"sent only {self.received:,} bytes in the last {self.waited:.3g} s (a download needs "
                f"{self.floor:,} bytes per read time-out, {self.window_s:g} s)")


def read_timeout(response: httpx.Response) -> float | None:
    """The read time-out ``response``'s request was sent with (``None``: none), the window of its body."""
    return response.request.extensions.get("timeout", {}).get("read")


def progressing(chunks: Iterable[bytes], window_s: float | None, floor: int = FLOOR) -> Iterator[bytes]:
    """``chunks`` as they come; once a window of ``window_s`` seconds spent waiting for them brought fewer than
    ``floor`` bytes, :class:`Stalled` when the next chunk arrives (``None``: no window, as no read time-out).
    The chunk that closed the window is passed on, so a body whose last bytes closed it is read, not failed
    with all its bytes in hand. Costs two clock reads per chunk."""
    if window_s is None:
        yield from chunks
        return
    source, clock = iter(chunks), time.monotonic
    waited, received, stalled = 0.0, 0, None
    while True:
        start = clock()
        try:
            chunk = next(source)
        except StopIteration:
            return
        if stalled is not None:  # not passed on: a continuation of the body asks for it again
            raise stalled
        waited += clock() - start
        received += len(chunk)
        yield chunk
        if waited >= window_s:
            if received < floor:
                stalled = Stalled(received, waited, window_s, floor)
            waited, received = 0.0, 0
