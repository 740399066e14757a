"""Physical lines at the start of a file, read as the text readers read them: ``linesToIgnore`` skips lines
ended by CRLF, CR or LF (``io.TextIOWrapper(newline="")``'s lines), each of which must be valid UTF-8 as the
reader's decoder would find, and a header is parsed from what follows. Both columnar paths (CSV and NDJSON)
start here, then hand :meth:`Head.rest` to the store.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import IO

_LINE_END = re.compile(rb"\r\n|\r|\n")


class Prefixed(io.RawIOBase):
    """``head`` then the rest of ``stream``."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self._head, self._stream = head, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]  # BufferedReader passes a memoryview
        view = memoryview(buffer).cast("B")
        if self._head:
            chunk, self._head = self._head[:len(view)], self._head[len(view):]
        else:
            chunk = self._stream.read(len(view))
        view[:len(chunk)] = chunk
        return len(chunk)


class Head:
    """The first bytes of the file, read as far as needed to skip lines and parse the header."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream, self.data, self.pos, self.eof = stream, b"", 0, False

    def more(self) -> bool:
        chunk = b"" if self.eof else self.stream.read(1 << 16)
        self.eof = not chunk
        self.data += chunk
        return bool(chunk)

    def line(self) -> bytes | None:
        """The next physical line with its line break (``\\r\\n``, ``\\r`` or ``\\n``), None at the end."""
        while True:
            found = _LINE_END.search(self.data, self.pos)
            if found and (found.end() < len(self.data) or self.eof or found.group() != b"\r"):
                end = found.end()
                break
            if not self.more():
                if self.pos >= len(self.data):
                    return None
                end = len(self.data)
                break
        line, self.pos = self.data[self.pos:end], end
        return line

    def rest(self) -> IO[bytes]:
        """What follows the lines read, as one stream."""
        return io.BufferedReader(Prefixed(self.data[self.pos:], self.stream), 1 << 20)

    def lines(self) -> Iterator[str]:
        while (line := self.line()) is not None:
            yield line.decode("utf-8")  # strict: bytes that are not UTF-8 are the slow path's to report


def skipped(head: Head, count: int) -> None:
    """Skip ``count`` physical lines (fewer at the end of the file); raises ``UnicodeDecodeError`` on a line
    that is not UTF-8, which the text reader would refuse too."""
    for _ in range(count):
        line = head.line()
        if line is None:
            return
        line.decode("utf-8")


def after_lines(stream: IO[bytes], count: int) -> IO[bytes]:
    """``stream`` after its first ``count`` physical lines (:func:`skipped`)."""
    head = Head(stream)
    skipped(head, count)
    return head.rest()
