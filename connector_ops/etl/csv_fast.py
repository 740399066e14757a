"""The start of a CSV file for Push's columnar path: BOM, ignored lines and header read in Python, exactly
as :func:`.readers.read_csv` reads them, on the first bytes; the data rows are left as bytes for the store
(``create_from_csv``: Arrow's C parser behind a check of the quoting).

A file in another encoding is read as UTF-8 (:func:`~connector_ops.kernel.streams.as_utf8`, decoded as
the slow path decodes it), so its rows take the same path. Files this cannot start exactly like the slow
path (a delimiter of more than one byte in UTF-8, a BOM under plain ``utf-8`` or a U+FEFF an encoding
keeps, no header row, bytes that are not in the encoding in the first lines) get ``None``: Push reads them
with the ``csv`` module.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from collections.abc import Iterator
from typing import IO

from connector_ops.etl.readers import FIELD, check_names
from connector_ops.kernel.streams import as_utf8

_LINE_END = re.compile(rb"\r\n|\r|\n")


class Prefixed(io.RawIOBase):
    """``head`` then the rest of ``stream``."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self._head, self._stream = head, stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        if self._head:
            chunk, self._head = self._head[:len(view)], self._head[len(view):]
        else:
            chunk = self._stream.read(len(view))
        view[:len(chunk)] = chunk
        return len(chunk)


class _Head:
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

    def lines(self) -> Iterator[str]:
        while (line := self.line()) is not None:
            yield line.decode("utf-8")  # strict: bytes that are not UTF-8 are the slow path's to report


def data_rows(stream: IO[bytes], *, delimiter: str, lines_to_ignore: int, header: bool,
              schema: list[str] | None, encoding: str) -> tuple[list[str], IO[bytes]] | None:
    """``(column names, the data rows' bytes)``, or ``None`` when the slow path must read this file."""
    if len(delimiter.encode()) != 1:
        return None
    stream, encoding = as_utf8(stream, encoding)
    head = _Head(stream)
    head.more()
    if head.data.startswith(codecs.BOM_UTF8):
        if encoding != "utf-8-sig":
            return None  # then the BOM is a character of the text: its rules are the slow path's
        head.pos = len(codecs.BOM_UTF8)
    try:
        for _ in range(lines_to_ignore):
            line = head.line()
            if line is None:
                break
            line.decode("utf-8")
        columns = next((r for r in csv.reader(head.lines(), delimiter=delimiter, strict=True) if r), None) \
            if header else None
    except (UnicodeDecodeError, csv.Error):
        return None
    if schema is not None:
        columns = list(schema)
    if not columns:
        return None
    check_names(columns, "parameters.schema" if schema is not None else FIELD)
    return columns, io.BufferedReader(Prefixed(head.data[head.pos:], stream), 1 << 20)
