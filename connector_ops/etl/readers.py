"""Streaming readers that turn a platform file's bytes into rows for Push: CSV here, JSON in
:mod:`.json_readers`; what both share (every value as text, skipped lines, decoding errors) is here too.

CSV follows research/etl.md §3.3: Python's ``csv`` module with ``strict=True`` and ``newline=""``
(RFC 4180 quoting, embedded newlines, CRLF), BOM tolerated, ``linesToIgnore`` physical lines skipped
before parsing, completely empty records skipped, whitespace kept, and a ragged row is an error naming
its line. Both yield batches so memory stays bounded whatever the file size.
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Iterator
from decimal import Decimal
from typing import IO, Any

from connector_ops.etl.quarantine import Quarantine, record_text
from connector_ops.kernel import limits
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.json_text import compact_json
from connector_ops.kernel.limits import check_column_names, longer_than_allowed
from connector_ops.kernel.scoped import pages
from connector_ops.kernel.streams import Open

#: the most rows a batch holds; fewer when they are wide (:func:`~connector_ops.kernel.scoped.pages`)
BATCH = 10_000
FIELD = "platformFile"


def cell_text(value: Any) -> str | None:
    """Store every value as text: strings as they are, other JSON values as their JSON text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    return compact_json(value)


def text_stream(stream: IO[bytes], encoding: str) -> io.TextIOWrapper:
    return io.TextIOWrapper(stream, encoding=encoding, errors="strict", newline="")


def drops_bom(encoding: str) -> bool:
    """Does the decoder of ``encoding`` drop a BOM starting the text itself (``utf-8-sig``, ``utf-16``,
    ``utf-32``), so that a U+FEFF after it is a character of the text?"""
    return codecs.lookup(encoding).name in ("utf-8-sig", "utf-16", "utf-32")


def skip_lines(text: io.TextIOWrapper, count: int) -> int:
    skipped = 0
    while skipped < count and text.readline():
        skipped += 1
    return skipped


class LineTooLong(Exception):
    """A line holds more than :data:`~connector_ops.kernel.limits.MAX_VALUE` characters (:func:`capped_lines`)."""


def capped_lines(text: io.TextIOWrapper) -> Iterator[str]:
    """The lines of ``text``, each read no further than ``limits.MAX_VALUE`` characters: a longer line raises
    :class:`LineTooLong` before the rest of it is read, where iterating the text would hold the whole line
    (a gzip of a 1 GiB line took 6 GiB). The caller knows the line's number."""
    limit = limits.MAX_VALUE
    while line := text.readline(limit + 1):
        if len(line) > limit and line[-1] not in "\r\n":
            raise LineTooLong
        yield line


def file_lines(text: io.TextIOWrapper, encoding: str, lines_to_ignore: int) -> Iterator[str]:
    """The lines of ``text`` (:func:`capped_lines`) without a BOM the decoder of ``encoding`` kept as a
    character (``utf-8``, ``utf-16-le``) starting the first, as the default ``utf-8-sig`` drops it: once, and
    only from the file's first line (ignored lines are skipped by the caller, from the same ``text``)."""
    lines = capped_lines(text)
    return _bom_dropped(lines) if lines_to_ignore == 0 and not drops_bom(encoding) else lines


def _bom_dropped(lines: Iterator[str]) -> Iterator[str]:
    """``lines`` without a U+FEFF starting the first, dropped before it is parsed: a CSV's quoted first field
    stays quoted (it was dropped from the first header cell after parsing: ``\ufeff"id"`` named the column
    ``"id"``, quotes and all, and a file without a header kept it in its first value), and an NDJSON's first
    object is read (a 400 before, where an array with the same BOM was read)."""
    first = next(lines, None)
    if first is None:
        return
    yield first.removeprefix("\ufeff")
    yield from lines


def too_long(line: int, what: str = "a line") -> InvalidInput:
    return InvalidInput(FIELD, f"line {line}: {longer_than_allowed(what)}")


def decode_error(exc: UnicodeDecodeError, encoding: str, reopen: Open | None) -> InvalidInput:
    """The decoder works on 8 KiB chunks, so the parser's line is only near the bad byte: find the exact one."""
    if reopen is not None and _starts_with(reopen, b"PAR1"):  # a Parquet file named as text
        return InvalidInput(FIELD, "the file is Parquet (it starts with PAR1), not text: name it .parquet or "
                                   "give contentType application/vnd.apache.parquet to push it as Parquet")
    where = f"line {_line_of_bad_byte(reopen, encoding)}: " if reopen is not None else ""
    return InvalidInput(FIELD, f"{where}the file is not valid {encoding} ({exc.reason}); "
                               "set parameters.encoding to the file's encoding")


def _starts_with(reopen: Open, head: bytes) -> bool:
    with reopen() as raw:
        return raw.read(len(head)) == head


def _line_of_bad_byte(reopen: Open, encoding: str) -> int:
    """The line of the first byte ``encoding`` cannot read, counted in the decoded text: a UTF-16 byte 0x0A
    is half of many characters (上, U+4E0A), not a line break. The decoder's error counts from the bytes it
    was decoding (``exc.object``), which is not the chunk read when it held part of a character back or
    dropped a BOM."""
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    line = 1
    with reopen() as stream:
        while chunk := stream.read(1 << 16):
            try:
                line += decoder.decode(chunk).count("\n")
            except UnicodeDecodeError as exc:
                return line + exc.object[:exc.start].decode(exc.encoding, "replace").count("\n")
    return line


RowBatches = Iterator[list[list[str]]]
RecordBatches = Iterator[list[dict[str, str | None]]]


def read_csv(stream: IO[bytes], *, delimiter: str, lines_to_ignore: int, header: bool,
             schema: list[str] | None, encoding: str, reopen: Open | None = None,
             quarantine: Quarantine | None = None) -> tuple[list[str], RowBatches]:
    """Return the column names and an iterator of row batches (lists aligned with the names). With a
    ``quarantine``, a ragged row is refused into it instead of failing the file."""
    text = text_stream(stream, encoding)
    csv.field_size_limit(limits.MAX_VALUE)  # the csv module's limit is process-wide: the one constant sets it
    reader = csv.reader(file_lines(text, encoding, lines_to_ignore), delimiter=delimiter, strict=True)
    offset = 0
    try:
        offset = skip_lines(text, lines_to_ignore)
        columns: list[str] | None = None
        if header:
            first = next((r for r in reader if r), None)
            columns = first or []
    except UnicodeDecodeError as exc:
        raise decode_error(exc, encoding, reopen) from None
    except (csv.Error, LineTooLong) as exc:
        raise _csv_error(exc, offset + reader.line_num) from None
    columns = named_columns(columns, schema)

    def records() -> Iterator[list[str]]:
        width = len(columns)
        try:
            for record in reader:
                if len(record) != width:
                    if not record:  # an empty line
                        continue
                    problem = (f"expected {width} fields, found {len(record)} "
                               "(a ragged row; check the delimiter and the quoting)")
                    if quarantine is None:
                        raise InvalidInput(FIELD, f"line {offset + reader.line_num}: {problem}")
                    quarantine.refuse(offset + reader.line_num, problem, record_text(record, delimiter))
                    continue
                yield record
        except UnicodeDecodeError as exc:
            raise decode_error(exc, encoding, reopen) from None
        except (csv.Error, LineTooLong) as exc:
            raise _csv_error(exc, offset + reader.line_num) from None

    return columns, pages(records(), BATCH)


def _csv_error(exc: csv.Error | LineTooLong, line: int) -> InvalidInput:
    """The 400 of the csv module's error, or of a line too long, where the reader had read ``line`` lines."""
    if isinstance(exc, LineTooLong):
        return too_long(line + 1)  # the line not handed to the reader
    if str(exc).startswith("field larger than field limit"):  # a quoted value over several lines
        return too_long(line, "a value")
    return InvalidInput(FIELD, f"line {line}: malformed CSV ({exc})")


check_names = check_column_names  # the one rule for every parser's header (kept under its old name)


def named_columns(header: list[str] | None, schema: list[str] | None) -> list[str]:
    """A CSV Push's columns (spec 4.C rule 2): the header row's when one is read, else ``schema``'s.

    With both, the header still names the columns and ``schema`` must list the same names (in any order): it
    used to rename the columns by position, which relabelled the data when its order was not the file's.
    To rename a file's columns, skip its header (``useFirstRowAsSchema: false, linesToIgnore: 1``)."""
    if not header:  # no header wanted, or none there (an empty file): the schema's names
        columns = list(schema or ())
        check_names(columns, "parameters.schema" if schema is not None else FIELD)
        return columns
    check_names(header, FIELD)
    if schema is not None and set(schema) != set(header):
        check_names(schema, "parameters.schema")
        missing = [name for name in schema if name not in header]
        extra = [name for name in header if name not in schema]
        what = "; ".join(part for part in (
            missing and f"not in the header: {', '.join(map(repr, missing))}",
            extra and f"not in schema: {', '.join(map(repr, extra))}") if part)
        raise InvalidInput("parameters.schema", f"the header row names the columns (useFirstRowAsSchema is true) "
                                                f"and schema must list the same ones ({what}); to rename "
                                                "columns, skip the header: useFirstRowAsSchema: false, "
                                                "linesToIgnore: 1")
    return header
