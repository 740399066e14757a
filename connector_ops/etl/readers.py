"""Streaming readers that turn a platform file's bytes into rows for Push.

CSV follows research/etl.md §3.3: Python's ``csv`` module with ``strict=True`` and ``newline=""``
(RFC 4180 quoting, embedded newlines, CRLF), BOM tolerated, ``linesToIgnore`` physical lines skipped
before parsing, completely empty records skipped, whitespace kept, and a ragged row is an error naming
its line. JSON is an array of objects (streamed with ijson) or NDJSON (one object per line). Both
yield batches so memory stays bounded whatever the file size.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from decimal import Decimal
from typing import IO, Any

import ijson
from ijson.common import ObjectBuilder

from connector_ops.etl.json_array_lines import is_array
from connector_ops.etl.quarantine import Quarantine, record_text
from connector_ops.kernel.errors import InvalidInput
from connector_ops.kernel.limits import MAX_DEPTH, check_column_names, check_payload, deeper_than, too_many_digits
from connector_ops.kernel.streams import peekable

BATCH = 10_000
FIELD = "platformFile"

csv.field_size_limit(1 << 30)


def cell_text(value: Any) -> str | None:
    """Store every value as text: strings as they are, other JSON values as their JSON text."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=float)


def is_json(name: str, content_type: str) -> bool:
    lowered = name.lower()
    return "json" in content_type.lower() or lowered.endswith((".json", ".ndjson", ".jsonl"))


def _text(stream: IO[bytes], encoding: str) -> io.TextIOWrapper:
    return io.TextIOWrapper(stream, encoding=encoding, errors="strict", newline="")


def _skip_lines(text: io.TextIOWrapper, count: int) -> int:
    skipped = 0
    while skipped < count and text.readline():
        skipped += 1
    return skipped


Reopen = Callable[[], AbstractContextManager[IO[bytes]]]


def _decode_error(exc: UnicodeDecodeError, encoding: str, reopen: Reopen | None) -> InvalidInput:
    """The decoder works on 8 KiB chunks, so the parser's line is only near the bad byte: find the exact one."""
    where = f"line {_line_of_bad_byte(reopen, encoding)}: " if reopen is not None else ""
    return InvalidInput(FIELD, f"{where}the file is not valid {encoding} ({exc.reason}); "
                               "set parameters.encoding to the file's encoding")


def _line_of_bad_byte(reopen: Reopen, encoding: str) -> int:
    decoder = codecs.getincrementaldecoder(encoding)("strict")
    line = 1
    with reopen() as stream:
        while chunk := stream.read(1 << 16):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                return line + chunk[: max(exc.start, 0)].count(b"\n")
            line += chunk.count(b"\n")
    return line


RowBatches = Iterator[list[list[str]]]
RecordBatches = Iterator[list[dict[str, str | None]]]


def read_csv(stream: IO[bytes], *, delimiter: str, lines_to_ignore: int, header: bool,
             schema: list[str] | None, encoding: str, reopen: Reopen | None = None,
             quarantine: Quarantine | None = None) -> tuple[list[str], RowBatches]:
    """Return the column names and an iterator of row batches (lists aligned with the names). With a
    ``quarantine``, a ragged row is refused into it instead of failing the file."""
    text = _text(stream, encoding)
    reader = csv.reader(text, delimiter=delimiter, strict=True)
    offset = 0
    try:
        offset = _skip_lines(text, lines_to_ignore)
        columns: list[str] | None = None
        if header:
            first = next((r for r in reader if r), None)
            columns = first or []
            if offset == 0 and columns and columns[0].startswith("\ufeff"):
                columns[0] = columns[0][1:]
    except UnicodeDecodeError as exc:
        raise _decode_error(exc, encoding, reopen) from None
    except csv.Error as exc:
        raise InvalidInput(FIELD, f"line {offset + reader.line_num}: malformed CSV ({exc})") from None
    if schema is not None:
        columns = list(schema)
    assert columns is not None
    check_names(columns, "parameters.schema" if schema is not None else FIELD)

    def batches() -> RowBatches:
        width = len(columns)
        batch: list[list[str]] = []
        append = batch.append
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
                append(record)
                if len(batch) >= BATCH:
                    yield batch
                    batch = []
                    append = batch.append
        except UnicodeDecodeError as exc:
            raise _decode_error(exc, encoding, reopen) from None
        except csv.Error as exc:
            raise InvalidInput(FIELD, f"line {offset + reader.line_num}: malformed CSV ({exc})") from None
        if batch:
            yield batch

    return columns, batches()


check_names = check_column_names  # the one rule for every parser's header (kept under its old name)


def read_json(stream: IO[bytes], *, lines_to_ignore: int, encoding: str,
              reopen: Reopen | None = None, quarantine: Quarantine | None = None) -> RecordBatches:
    """Batches of rows from a JSON array of objects or from NDJSON (one object per line). With a
    ``quarantine``, an NDJSON line that is not a JSON object is refused into it instead of failing."""
    buffered = peekable(stream)
    if is_array(buffered.peek(64)) and lines_to_ignore == 0:
        yield from _json_array(buffered)
    else:
        yield from _ndjson(buffered, lines_to_ignore, encoding, reopen, quarantine)


def _row(value: Any, where: str) -> dict[str, str | None]:
    if not isinstance(value, dict):
        raise InvalidInput(FIELD, f"{where}: expected a JSON object (a row), found {type(value).__name__}")
    return {str(k): cell_text(v) for k, v in value.items()}


def _json_array(stream: IO[bytes]) -> RecordBatches:
    batch: list[dict[str, str | None]] = []
    index = 0
    try:
        for index, item in enumerate(_array_items(stream), 1):
            batch.append(_row(item, f"item {index}"))
            if len(batch) >= BATCH:
                yield batch
                batch = []
    except ijson.JSONError as exc:
        raise InvalidInput(FIELD, f"malformed JSON after item {index}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(FIELD, f"the file is not valid UTF-8 ({exc.reason})") from None
    except (ValueError, SystemError):  # yajl's C backend wraps int()'s digit limit in a SystemError
        raise InvalidInput(FIELD, f"holds {too_many_digits()}") from None  # yajl parses ahead: no item number
    if batch:
        yield batch


def _array_items(stream: IO[bytes]) -> Iterator[Any]:
    """The items of the top-level array, built from ijson's flat events: ``ijson.items`` builds a path
    string per event (memory quadratic in the depth), and nothing there bounds the nesting."""
    events = ijson.basic_parse(stream)
    next(events, None)  # the top-level "[" (read_json peeked it)
    depth, index, builder = 1, 1, None
    for event, value in events:
        if event in ("start_map", "start_array"):
            depth += 1
            if depth - 1 > MAX_DEPTH:
                raise InvalidInput(FIELD, f"item {index}: {deeper_than()}")
        elif event in ("end_map", "end_array"):
            depth -= 1
            if depth == 0:
                continue  # the end of the top-level array
        if builder is None and depth == 1:
            yield value  # a bare scalar item (refused by the caller: rows are objects)
            index += 1
            continue
        if builder is None:
            builder = ObjectBuilder()
        builder.event(event, value)
        if depth == 1:
            yield builder.value
            builder, index = None, index + 1


def _json_line(line: str, number: int) -> Any:
    """One NDJSON line, or a 400 naming it: malformed, nested too deeply, a number too long for Python."""
    try:
        value = json.loads(line, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        raise InvalidInput(FIELD, f"line {number}: malformed JSON ({exc.msg}, column {exc.colno}); "
                                  "expected a JSON array of objects or one object per line") from None
    except RecursionError:
        raise InvalidInput(FIELD, f"line {number}: {deeper_than()}") from None
    except ValueError:  # int()'s digit limit
        raise InvalidInput(FIELD, f"line {number}: holds {too_many_digits()}") from None
    try:
        check_payload(value, limit=MAX_DEPTH + 1, nul=False)  # the row object itself is one level
    except InvalidInput as exc:
        raise InvalidInput(FIELD, f"line {number}: {exc}") from None
    return value


def _ndjson(stream: IO[bytes], lines_to_ignore: int, encoding: str, reopen: Reopen | None,
            quarantine: Quarantine | None = None) -> RecordBatches:
    text = _text(stream, encoding)
    batch: list[dict[str, str | None]] = []
    number = 0
    try:
        number = _skip_lines(text, lines_to_ignore)
        for line in text:
            number += 1
            if not line.strip():
                continue
            try:
                row = _row(_json_line(line, number), f"line {number}")
            except InvalidInput as exc:
                if quarantine is None:
                    raise
                quarantine.refuse(number, exc.problem.removeprefix(f"line {number}: "), line.rstrip("\r\n"))
                continue
            batch.append(row)
            if len(batch) >= BATCH:
                yield batch
                batch = []
    except UnicodeDecodeError as exc:
        raise _decode_error(exc, encoding, reopen) from None
    if batch:
        yield batch
