"""Data rows of a CSV file as Arrow record batches of strings: Arrow's C parser (``pyarrow.csv``) behind a
check that it reads exactly what Python's ``csv`` module reads.

The two parsers agree on every file whose quoting is plain RFC 4180: each quote opens a field (right after
a delimiter, a line break or the start) or closes one (right before a delimiter, a line break or the end),
and inside a quoted field quotes come in pairs. Anything else — a quote inside an unquoted field, text
after a closing quote, an unterminated quote — raises :class:`NotPlainCSV`, and the caller reads the file
with the ``csv`` module instead, which accepts it as before or reports the exact line. The check is one
regular expression per 1 MiB block (possessive repeats: linear), run as Arrow pulls the bytes. Empty lines
are skipped and line breaks inside quotes kept by both parsers; a ragged row or bytes that are not UTF-8
make Arrow raise.
"""

from __future__ import annotations

import io
import re
from collections.abc import Generator
from functools import lru_cache
from typing import IO, Any

from connector_ops.resources.virtual_files.crlf_blocks import WholeCRLF
from connector_ops.resources.virtual_files.paced import LEAVE, Paced

BLOCK = 1 << 20
#: a quoted field still open after this many bytes is left to the slow path, so the check stays linear
LONGEST_QUOTED = 8 << 20


class NotPlainCSV(ValueError):
    """The bytes are outside what Arrow reads exactly like the ``csv`` module."""


@lru_cache(maxsize=16)
def _plain(delimiter: bytes, at_end: bool) -> re.Pattern[bytes]:
    """Runs without quotes, and quoted fields that open and close at field boundaries: ``match`` stops at
    the first quote that is not such a field."""
    boundary = b"[" + re.escape(delimiter) + rb"\r\n]"
    after = b"(?=" + boundary + (rb"|\Z" if at_end else b"") + b")"
    quoted = b"(?:(?<=" + boundary + rb')|^)"(?:[^"]++|"")*+"' + after
    return re.compile(rb'(?:[^"]++|' + quoted + b")*+")


class CheckedBytes(io.RawIOBase):
    """``stream`` (starting at a row boundary), checked for plain quoting as it is read.

    The bytes go on at once; a quoted field still open at the end of a block is checked again with the
    next one. A violation raises :class:`NotPlainCSV` from ``read``."""

    def __init__(self, stream: IO[bytes], delimiter: bytes) -> None:
        self._stream, self._delimiter = stream, delimiter
        self._pending = b""  # bytes not yet proven plain; after the first block, one byte of context first
        self._start = 0  # where matching starts in the pending bytes (0: the start of the data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        chunk = self._stream.read(len(view))
        self._check(chunk)
        view[:len(chunk)] = chunk
        return len(chunk)

    def _check(self, chunk: bytes) -> None:
        at_end = not chunk
        data = self._pending + chunk if self._pending else chunk
        plain = _plain(self._delimiter, at_end).match(data, self._start)
        assert plain is not None  # (the pattern matches the empty string)
        end = plain.end()
        if end == len(data):
            self._pending, self._start = data[-1:], min(len(data), 1)
        elif at_end:
            raise NotPlainCSV("a quote the csv module reads differently (or an unterminated one)")
        elif len(data) - end > LONGEST_QUOTED:
            raise NotPlainCSV("a quoted field longer than the fast reader checks")
        elif end == 0 and self._start == 0:
            self._pending = data  # an open quoted field right at the start: keep all, still at the start
        else:
            self._pending, self._start = data[end - 1:], 1


def csv_batches(stream: IO[bytes], width: int, delimiter: str) -> Generator[Any, None, None]:
    """Record batches of the data rows in ``stream``: string columns ``c0…c{width-1}``. However they end
    (the rows read, an error, the consumer closing them), Arrow's reading thread has left ``stream`` by then
    (:meth:`.Paced.stop`)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    names = [f"c{i}" for i in range(width)]
    paced = Paced(CheckedBytes(stream, delimiter.encode()), BLOCK)
    buffered = paced.buffered()
    if not buffered.peek(1):  # no data rows (Arrow calls an empty input an error)
        return
    try:
        reader = pacsv.open_csv(
            paced.entrance(WholeCRLF(buffered)),
            read_options=pacsv.ReadOptions(column_names=names, block_size=BLOCK),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char='"', double_quote=True,
                                             escape_char=False, newlines_in_values=True, ignore_empty_lines=True),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()), check_utf8=True,
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
        yield from paced.taken(reader)
    finally:
        paced.stop(LEAVE)
