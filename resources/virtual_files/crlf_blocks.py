"""Arrow's CSV reader fed so that no CRLF is split between two of its buffers (apache/arrow#51368).

Arrow's CSV reader drops the LF at the start of a buffer whenever the buffer before it ended with a CR,
even where that CR and LF are the inside of a quoted value (pyarrow 26.0.1 does; the fix, apache/arrow#51394,
is not released). So a value holding a CRLF that straddled a block lost its LF, silently: a random 14 MiB
file of the Push tests came back one byte short in one value. :class:`WholeCRLF` moves such a cut one byte
earlier, so the CR opens the next buffer with its LF; the bytes themselves are unchanged.
"""

from __future__ import annotations

import io
from typing import IO, Any

_CR, _LF = 13, 10


class WholeCRLF(io.RawIOBase):
    """``stream`` read a buffer at a time, never ending a buffer on the CR of a CRLF (one byte of ``stream``
    is read ahead to know)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._pending = b""
        self._ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        size = len(view)
        while len(self._pending) <= size and not self._ended:
            chunk = self._stream.read(size + 1 - len(self._pending))
            self._ended = not chunk
            self._pending += chunk
        cut = min(size, len(self._pending))
        if 1 < cut < len(self._pending) and self._pending[cut - 1] == _CR and self._pending[cut] == _LF:
            cut -= 1
        view[:cut] = self._pending[:cut]
        self._pending = self._pending[cut:]
        return cut
