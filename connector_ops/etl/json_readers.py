"""Streaming readers of JSON rows for Push: a JSON array of objects, or NDJSON (one object per line).

Two parsers, one reading. Python's ``json`` (C) reads one line at a time: NDJSON, and a JSON array laid out
one object per line, handed on as lines by :class:`.json_array_lines.ArrayLines` (what Pull writes, and
most exports), or with its items side by side or pretty-printed, laid out one per line first
(:func:`.json_layouts.items_per_line`: what ``json.dump`` writes, with or without ``indent``). ``ijson``
(yajl events, built into objects in Python: ≈ 4× slower) reads any other array.

For an array the line parser is only a faster way to the event parser's rows: it hands on an item only when
yajl would read it the same, and at the first thing it cannot vouch for — another layout, ``NaN``, an escaped
surrogate (a lone one becomes ``?``: :mod:`.json_surrogates`), any error at all — the event parser reads the
file again from the start, passes over the items already handed on, and goes on from there or words the
error. So an array gives the same rows and the same errors whichever parser read it, and nothing is written
twice.
"""

from __future__ import annotations

import io
import json
import json.scanner
import re
from collections.abc import Generator, Iterator
from decimal import Decimal
from typing import IO, Any

import ijson
from ijson.common import ObjectBuilder

from connector_ops.etl.json_array_lines import LAYOUT_PEEK, ArrayLines, array_head
from connector_ops.etl.json_surrogates import basic_events
from connector_ops.etl.quarantine import Quarantine
from connector_ops.etl.readers import (
    BATCH,
    FIELD,
    LineTooLong,
    RecordBatches,
    cell_text,
    decode_error,
    file_lines,
    skip_lines,
    text_stream,
    too_long,
)
from connector_ops.etl.suffixes import ends_with
from connector_ops.kernel import limits
from connector_ops.kernel.errors import InvalidInput, UpstreamError
from connector_ops.kernel.limits import (
    MAX_DEPTH,
    check_payload,
    deeper_than,
    longer_than_allowed,
    too_many_digits,
)
from connector_ops.kernel.media_types import media_type
from connector_ops.kernel.scoped import pages
from connector_ops.kernel.streams import Open, as_utf8, past_bom, peekable

#: the values a row may hold without any conversion to text
_TEXT = frozenset({str, type(None)})
#: ``\\uD800``–``\\uDFFF``: half of a UTF-16 pair (an emoji's, usually), or a lone half no text can hold
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class NotJsonConstant(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a file: Python's ``json`` reads them, but they are not JSON."""


def no_constant(name: str) -> Any:
    """The ``parse_constant`` of every reader of a file's JSON: yajl (a JSON array's event parser) refuses
    ``NaN`` and the infinities, so NDJSON and the array's line parser refuse them too, as Append Rows does."""
    raise NotJsonConstant(f"{name} is not a JSON number: JSON has no NaN or Infinity")


#: one decoder, made once: ``json.loads`` with options builds a new one per call
_NDJSON_LINE = json.JSONDecoder(parse_float=Decimal, parse_constant=no_constant).decode
#: the decoder's C scanner itself, for array items: their errors are never worded (the event parser words them)
# (typeshed types the scanner's context as a scanner, "TODO: a ducktype" there; CPython's json.decoder passes a decoder)
_SCAN_ITEM = json.scanner.make_scanner(json.JSONDecoder(  # type: ignore[arg-type]
    parse_float=Decimal, parse_constant=no_constant))
_JSON_SPACE = " \t\r\n"
#: the text of a value of these types is ``str`` of it (a bool's is not: ``type(True)`` is not ``int``)
_STR_IS_TEXT = {int: str, Decimal: str}


#: the name endings of an NDJSON file (one object per line), which Pull writes as NDJSON too
NDJSON_SUFFIXES = (".ndjson", ".jsonl")
#: the name endings of a JSON file (an array, or one object per line)
JSON_SUFFIXES = (".json", *NDJSON_SUFFIXES)


#: NDJSON's media type (what Pull writes for an NDJSON name, and ``files add`` gives one)
NDJSON_TYPE = "application/x-ndjson"


def is_json(name: str, content_type: str) -> bool:
    return "json" in content_type.lower() or ends_with(name, JSON_SUFFIXES)


def is_ndjson(name: str, content_type: str) -> bool:
    """Whether a JSON file is NDJSON (one object per line) by its name or its content type, as Pull writes it."""
    return ends_with(name, NDJSON_SUFFIXES) or media_type(content_type) == NDJSON_TYPE


def read_json(stream: IO[bytes], *, lines_to_ignore: int, encoding: str,
              reopen: Open | None = None, quarantine: Quarantine | None = None) -> RecordBatches:
    """Batches of rows from a JSON array of objects or from NDJSON (one object per line). With a
    ``quarantine``, an NDJSON line that is not a JSON object is refused into it instead of failing.
    ``reopen`` lets an array laid out one object per line be read by lines (see the module's docstring).
    Either is read in ``encoding``: an array's text as UTF-8, converted a chunk at a time as it is read."""
    buffered = peekable(stream, LAYOUT_PEEK)
    head = None if lines_to_ignore else array_head(buffered.peek(LAYOUT_PEEK), encoding)
    if head is None:
        yield from _ndjson(buffered, lines_to_ignore, encoding, reopen, quarantine)
    elif reopen is None:
        yield from _json_array(as_utf8(buffered, encoding)[0], encoding=encoding)
    else:
        from connector_ops.etl.json_layouts import items_per_line  # numpy: kept out of every action's import

        text = as_utf8(buffered, encoding)[0]
        yield from _array_by_lines(items_per_line(text, head, 1 << 16), reopen, encoding)


def _row(value: Any, where: str) -> dict[str, str | None]:
    """A JSON object as a row, every value text (:func:`.readers.cell_text`). Its keys are text already."""
    if not isinstance(value, dict):
        raise InvalidInput(FIELD, f"{where}: expected a JSON object (a row), found {type(value).__name__}")
    if _TEXT.issuperset(map(type, value.values())):
        return value
    return {k: v if type(v) is str else _STR_IS_TEXT.get(type(v), cell_text)(v) for k, v in value.items()}


def _within(line: str, limit: int) -> bool:
    """Can no value on ``line`` nest deeper than ``limit`` levels? Each level opens a bracket, so a line with no
    more brackets than that (those inside strings counted too) cannot, and its value need not be walked
    (:func:`~connector_ops.kernel.limits.check_payload`: 8 µs of a 12 µs line with one nested value)."""
    return line.count("{") + line.count("[") <= limit


# -- a JSON array ------------------------------------------------------------------------------------
def _array_by_lines(stream: IO[bytes], reopen: Open, encoding: str) -> RecordBatches:
    """Batches read by lines while that holds; then the event parser's, from the first item not handed on.
    ``stream`` is the array as UTF-8; ``reopen`` reads the file again in ``encoding``."""
    rows = _item_rows(stream)
    batches = pages(rows, BATCH)
    handed = 0
    while True:
        try:
            batch = next(batches, None)
        except UpstreamError:  # the file's server failed, not its bytes: reading it again would wait again
            raise
        except Exception:  # whatever it is (a fault, another layout, a value to doubt), the event parser judges it
            rows.close()
            break
        if batch is None:
            return
        yield batch
        handed += len(batch)
    with reopen() as again:
        yield from _json_array(as_utf8(again, encoding)[0], skip=handed, encoding=encoding, reopen=reopen)


def _item_rows(stream: IO[bytes]) -> Generator[dict[str, str | None], None, None]:
    """The array's items, one per line, as rows; raises at anything yajl might read otherwise."""
    lines = io.TextIOWrapper(io.BufferedReader(ArrayLines(stream), 1 << 16), encoding="utf-8", newline="")
    for line in lines:
        if not line.isspace():
            yield _item(line)


def _item(line: str, *, pairs: bool = False) -> dict[str, str | None]:
    """An array's item on a line of its own, as a row; raises at anything yajl might read otherwise (an escaped
    surrogate, ``NaN``, more than one value, nesting as deep as yajl's reading refuses, not JSON). ``pairs``:
    a whole escaped surrogate pair passes (yajl reads it alike); half of one still raises."""
    doubt = _SURROGATE_ESCAPE.search(line)
    if doubt and not pairs:
        raise ValueError("an escaped surrogate")
    start = 0 if line.startswith("{") else len(line) - len(line.lstrip(_JSON_SPACE))
    value, end = _SCAN_ITEM(line, start)
    if line[end:].strip(_JSON_SPACE):
        raise ValueError("more than one value on the line")
    if doubt or not _within(line, MAX_DEPTH):
        check_payload(value, limit=MAX_DEPTH, nul=False, long_decimals=True)
    return _row(value, "an item")


def _json_array(stream: IO[bytes], skip: int = 0, *, encoding: str = "utf-8",
                reopen: Open | None = None) -> RecordBatches:
    """The event parser's rows, but for the first ``skip`` items (handed on already). ``stream`` is the array as
    UTF-8; ``encoding`` and ``reopen`` (the file as it is) word an error in decoding it."""
    index = 0

    def rows() -> Iterator[dict[str, str | None]]:
        nonlocal index
        for index, item in enumerate(_array_items(stream), 1):
            if index > skip:
                yield _row(item, f"item {index}")

    try:
        yield from pages(rows(), BATCH)
    except ijson.JSONError as exc:
        raise InvalidInput(FIELD, f"malformed JSON after item {index}: {_parser_words(exc)}") from None
    except UnicodeDecodeError as exc:
        raise decode_error(exc, encoding, reopen) from None
    except (ValueError, SystemError):  # yajl's C backend wraps int()'s digit limit in a SystemError
        raise InvalidInput(FIELD, f"holds {too_many_digits()}") from None  # yajl parses ahead: no item number


def _parser_words(exc: ijson.JSONError) -> str:
    """yajl's message as text: its C backend gives some as bytes (``b'lexical error: …'`` in a 400 was Python's
    repr). Bytes that are not UTF-8, which it quotes from the file, are shown escaped; and as that error means
    the file is in another encoding, the message says what to set."""
    words = exc.args[0] if exc.args else str(exc)
    if isinstance(words, bytes):
        words = words.decode("utf-8", "backslashreplace")
    if "invalid bytes in UTF8 string" in words:
        words = f"{words.rstrip()}\n(the file is not UTF-8: set parameters.encoding to the file's encoding)"
    return words


def _array_items(stream: IO[bytes]) -> Iterator[Any]:
    """The items of the top-level array, built from ijson's flat events: ``ijson.items`` builds a path
    string per event (memory quadratic in the depth), and nothing there bounds the nesting. A string over
    ``limits.MAX_VALUE`` is refused as it comes (yajl has read it whole; Python has not copied it yet). A lone
    half of a surrogate pair becomes ``?``, the low half too (:mod:`.json_surrogates`). A UTF-8 BOM starting the
    file is dropped (yajl refuses it), as the line parser drops it (:class:`.json_array_lines.ArrayLines`)."""
    events = basic_events(past_bom(stream))
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
        elif event in ("string", "map_key") and len(value) > limits.MAX_VALUE:  # yajl hands it on whole
            raise InvalidInput(FIELD, f"item {index}: {longer_than_allowed('a value')}")
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


# -- NDJSON ------------------------------------------------------------------------------------------
def _json_line(line: str, number: int) -> Any:
    """One NDJSON line, or a 400 naming it: malformed (``NaN`` too, as in an array), nested too deeply, a
    number too long for Python, half a surrogate pair."""
    try:
        if line.startswith("\ufeff"):  # json.loads's own test, which the decoder skips
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", line, 0)
        value = _NDJSON_LINE(line)
    except json.JSONDecodeError as exc:
        raise InvalidInput(FIELD, f"line {number}: malformed JSON ({exc.msg}, column {exc.colno}); "
                                  "expected a JSON array of objects or one object per line") from None
    except RecursionError:
        raise InvalidInput(FIELD, f"line {number}: {deeper_than()}") from None
    except NotJsonConstant as exc:
        raise InvalidInput(FIELD, f"line {number}: malformed JSON ({exc})") from None
    except ValueError:  # int()'s digit limit
        raise InvalidInput(FIELD, f"line {number}: holds {too_many_digits()}") from None
    if _SURROGATE_ESCAPE.search(line) or not _within(line, MAX_DEPTH + 1):
        try:
            # the row is one level; a long number is text (NaN never gets here: :func:`no_constant`)
            check_payload(value, limit=MAX_DEPTH + 1, nul=False, long_decimals=True)
        except InvalidInput as exc:
            raise InvalidInput(FIELD, f"line {number}: {exc}") from None
    return value


def stored_line(line: bytes) -> bytes:
    """One NDJSON line (UTF-8, its line break kept) as a line of the row it stores: every value the text this
    reader stores for it (:func:`_row`), as a JSON string. The columnar path's way with the lines whose values
    it cannot make text itself (:mod:`.json_scalars`): a nested value, ``1e5``.

    The line may be an NDJSON line or an array's item, whose readers differ at the edges, so it is read by the
    stricter, the array's line parser (:func:`_item`: no ``NaN``, a level less of nesting, no half of a
    surrogate pair). A line it would not vouch for raises :class:`~connector_ops.kernel.errors.InvalidInput`, and
    the columnar path gives the file up to the row reader, which reads it by its own rules."""
    text = line.decode("utf-8")
    body = text.rstrip("\r\n")
    try:
        row = _item(body, pairs=True)
    except (ValueError, RecursionError, StopIteration) as exc:  # the scanner's, and the checks' in _item
        raise InvalidInput(FIELD, f"a line left to the row reader: {exc!r}") from None
    return (json.dumps(row, ensure_ascii=False) + text[len(body):]).encode()


def _ndjson(stream: IO[bytes], lines_to_ignore: int, encoding: str, reopen: Open | None,
            quarantine: Quarantine | None = None) -> RecordBatches:
    try:
        yield from pages(_ndjson_rows(text_stream(stream, encoding), encoding, lines_to_ignore, quarantine), BATCH)
    except UnicodeDecodeError as exc:
        raise decode_error(exc, encoding, reopen) from None


def _ndjson_rows(text: io.TextIOWrapper, encoding: str, lines_to_ignore: int,
                 quarantine: Quarantine | None) -> Iterator[dict[str, str | None]]:
    number = skip_lines(text, lines_to_ignore)
    try:
        for line in file_lines(text, encoding, lines_to_ignore):
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
            yield row
    except LineTooLong:
        raise too_long(number + 1) from None
