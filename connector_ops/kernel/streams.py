"""A readable binary stream over an iterator of byte chunks (an HTTP body, the rows of a ``COPY … TO``).

Each read gathers whole chunks up to the reader's buffer, so chunks as small as one row (psycopg hands out
``COPY`` data a row at a time) cost an append each, not a read call each; memory stays one buffer plus one
chunk.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any


def peekable(stream: Any) -> Any:
    """``stream`` if it can ``peek``, else a ``BufferedReader`` over it (which can)."""
    return stream if hasattr(stream, "peek") else io.BufferedReader(stream)


class ChunkStream(io.RawIOBase):
    """The bytes of ``chunks`` (bytes or buffers), in order, as a raw stream; wrap it in a ``BufferedReader``."""

    def __init__(self, chunks: Iterable[Any]) -> None:
        self._chunks = iter(chunks)
        self._left = b""  # the part of the last chunk not handed out yet

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        parts, size = [self._left], len(self._left)
        while size < len(view):
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            parts.append(chunk)
            size += len(chunk)
        gathered = b"".join(parts)
        n = min(size, len(view))
        view[:n] = memoryview(gathered)[:n]
        self._left = gathered[n:]
        return n
