"""Push of plain CSV on PostgreSQL: the checked bytes go straight into the server's own ``COPY … (FORMAT csv)``.

Parsing with Arrow and writing the batches back out as CSV for ``COPY`` cost the client ≈ 0.6 s of CPU per
80 MiB, on the same cores the server needs to store the rows. But bytes whose quoting is plain RFC 4180
(:class:`.csv_columns.CheckedBytes` proves it as they stream) are read by the server's CSV parser exactly
as Python's ``csv`` module reads them, given ``FORCE_NOT_NULL`` on every column (an empty unquoted field is
``""``, not a missing value) — with two exceptions, both about whole lines: the ``csv`` module skips empty
lines, which ``COPY`` cannot, and ``COPY`` ends the data at a line that is ``\\.`` alone. So line breaks
at the very end are dropped here, and any other empty line or ``\\.`` line (or what looks like one inside
a quoted value) raises :class:`NotForCopy` before anything is committed: the caller then loads the file
through Arrow, which reads them as the ``csv`` module does. Whatever else the server refuses (a ragged
row, bytes that are not UTF-8, a NUL, mixed line endings) rolls the load back, and the row reader words it.
"""

from __future__ import annotations

import io
import re
from typing import IO, Any

#: two line breaks in a row make an empty line (a CRLF is one break: LF LF, LF CR, CR CR are two)
_EMPTY_LINE = (b"\n\n", b"\n\r", b"\r\r")
#: a line that is ``\.`` alone (searched only where ``\.`` occurs: ``in`` runs at C speed, a regex not)
_END_MARK = re.compile(rb"(?:\A|[\r\n])\\\.(?:[\r\n]|\Z)")
_BREAKS = b"\r\n"
#: a line longer than this (no line break in it) is left to Arrow, so what waits here stays bounded
LONGEST_LINE = 8 << 20


class NotForCopy(ValueError):
    """The data holds a line ``COPY`` reads otherwise than the ``csv`` module: load it through Arrow."""


class CopyableLines(io.RawIOBase):
    """``stream`` (data rows, starting at a row) as ``COPY`` may read it, whole lines at a time: the line
    breaks at its very end dropped (the ``csv`` module skips the empty lines they make), and
    :class:`NotForCopy` raised for any other empty line or a ``\\.`` line."""

    def __init__(self, stream: IO[bytes] | io.RawIOBase) -> None:  # a file, or a raw reader (csv_columns.CheckedBytes)
        self._stream = stream
        self._held = b""  # the last line, not yet ended (or the breaks ending the data so far)
        self._out = b""  # checked whole lines not yet handed out
        self._started = False  # has a line with content been seen (an empty line before it is one too)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._out:
            chunk = self._stream.read(max(len(view), 1 << 16))
            data = self._held + chunk
            if not chunk:  # the end: the last line without its trailing breaks
                self._held, self._out = b"", self._checked(data.rstrip(_BREAKS))
                if not self._out:
                    return 0
                break
            body = data.rstrip(_BREAKS)
            if not self._started and body:
                if data[:1] in (b"\r", b"\n"):
                    raise NotForCopy("an empty line before the first row")
                self._started = True
            cut = len(body) if len(body) < len(data) else max(body.rfind(b"\n"), body.rfind(b"\r")) + 1
            self._held, self._out = data[cut:], self._checked(data[:cut])
            if len(self._held) > LONGEST_LINE:
                raise NotForCopy("a line longer than the check holds")
        n = min(len(view), len(self._out))
        view[:n], self._out = self._out[:n], self._out[n:]
        return n

    @staticmethod
    def _checked(lines: bytes) -> bytes:
        if any(pair in lines for pair in _EMPTY_LINE) or (b"\\." in lines and _END_MARK.search(lines)):
            raise NotForCopy("an empty line, or a line that is \\. alone")
        return lines


#: the options of ``COPY … FROM STDIN`` (:func:`.loaders.copy_sql`) that read CSV as the ``csv`` module does (the
#: bytes are UTF-8, as every session of the store speaks: :mod:`.engines`)
COPY_OPTIONS = " (FORMAT csv, DELIMITER {delimiter}, QUOTE '\"', ESCAPE '\"', FORCE_NOT_NULL ({columns}))"


def copyable_delimiter(delimiter: str) -> bool:
    """``COPY`` takes a one-byte delimiter that is neither a quote nor a line break."""
    return len(delimiter.encode()) == 1 and delimiter not in '"\r\n'
