"""Push of NDJSON (and of JSON arrays laid out like it) on a columnar path: Arrow's C JSON reader, once every
value is a string or null in the bytes — numbers and booleans quoted, the few other lines written as text.

The row reader (:func:`.json_readers.read_json`) calls ``json`` once per line and keeps a number's exact
text (``1.50`` stays ``"1.50"``), which Arrow cannot: it reads numbers as doubles. So the numbers and
booleans whose stored text is the text they are written in (nearly all: ``7``, ``1.50``, ``true``) are
made strings of that text in the bytes first (:mod:`.json_scalars`); then Arrow reads exactly what the row
reader reads, several times faster. Arrow is asked first, and the file goes to the row reader (nothing
written) whenever Arrow's reading could differ from it:

* a line whose values :mod:`.json_scalars` cannot quote (a nested value, ``1e5``, ``-0``) is written again by
  the row reader's own conversion (:func:`.json_readers.stored_line`, ≈ 9 µs a line); when more than half
  the first block's lines would be, the row reader reads the file, which it does faster then. A line that
  conversion refuses fails the read;
* the first block decides the columns (:func:`columns_of`) and whether values are quoted at all (a file of
  strings is read as it is: 0.7 ms a MiB saved). A key it lacks fails the read; then every key of the file
  is found (:func:`every_key`: Arrow infers each block's keys) and the file read again with all of them. A
  number, boolean or nested value first seen after it fails the read too; then the file is read again with
  the pass. Each retry is taken once: another failure sends the file to the row reader;
* a key twice in one object, a lone surrogate, bytes that are not UTF-8, a line that is not an object,
  an empty file: Arrow fails too;
* Arrow accepts an object spread over several lines and several objects on one line, which NDJSON (and the
  row reader) refuses: the store audits the bytes as Arrow reads them (:mod:`…virtual_files.ndjson_columns`)
  and fails the load, before it commits, unless the number of non-blank lines equals the number of rows;
* a BOM under an explicit ``utf-8`` (the row reader refuses it; Arrow skips it): not tried.

``linesToIgnore`` skips physical lines as the row reader skips them (:mod:`.physical_lines`), and a ``schema``
puts its columns first, as the row reader orders them.

NDJSON or a JSON array in another encoding (``parameters.encoding``) is read as UTF-8, decoded as the row
reader decodes it; a byte the encoding has no character for fails the read, and the row reader names its line.

A JSON array laid out one object per line (what Pull's JSON export writes), with its items side by side on
one line (what ``json.dump`` and ``JSON.stringify`` write) or pretty-printed takes the same path, handed on
as NDJSON (:mod:`.json_layouts`, :mod:`.json_array_lines`); any other layout goes to the row reader.

Errors are never worded here: the row reader reads the file again and says exactly what and where.
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from connector_ops.etl.json_array_lines import LAYOUT_PEEK, ArrayLines, array_head
from connector_ops.etl.json_readers import no_constant, stored_line
from connector_ops.etl.physical_lines import after_lines
from connector_ops.kernel.errors import UpstreamError, gave_up_because
from connector_ops.kernel.limits import check_column_names
from connector_ops.kernel.progress import reading_with_progress, track
from connector_ops.kernel.streams import UTF8, Open, as_utf8, peekable
from connector_ops.resources.virtual_files.ndjson_columns import BLOCK

if TYPE_CHECKING:
    from connector_ops.resources.virtual_files.store import VirtualFileStore

log = logging.getLogger(__name__)

#: tests switch the fast path off to run every case through the row reader
FAST = True

_BOM = b"\xef\xbb\xbf"
#: Arrow's words when a value after the first block is not a string (its explicit schema's type): a number,
#: boolean or nested value the first block did not have, which the quoting pass makes text
_TYPE_CHANGED = re.compile(r"changed from string to (number|boolean|array|object)")
#: Arrow's words when a line has a key the explicit schema (the first block's keys) lacks
_NEW_KEY = "unexpected field"


def columns_of(head: bytes, encoding: str) -> list[str] | None:
    """The column names if Arrow may read this NDJSON, judged from its first block (:func:`_head`, numbers
    and booleans already quoted), else ``None``.

    Read with ``json`` (no Arrow in this process: on SQLite the loader process parses): every non-blank
    line of the block must be one object whose values are strings or null; the columns are the keys in the
    order they first appear, as the row reader orders them. A key that first appears later, or a later
    value of another type, fails Arrow's read (explicit schema), and the row reader takes over."""
    if encoding not in UTF8:
        return None
    if head.startswith(_BOM):
        if encoding != "utf-8-sig":
            return None
        head = head[len(_BOM):]
    columns: dict[str, None] = {}
    try:
        for line in head.decode("utf-8").split("\n"):
            if not line.strip(" \t\r"):
                continue
            row = json.loads(line, object_pairs_hook=_object, parse_constant=no_constant)  # NaN: not JSON
            if not isinstance(row, dict) or not all(v is None or isinstance(v, str) for v in row.values()):
                return None  # not an object, or a number, boolean, object or array: the row reader's
            columns.update(dict.fromkeys(row))
    except ValueError:  # not JSON, a key twice, not UTF-8, an object over several lines …
        return None
    if not columns:  # an empty file or rows of empty objects: nothing for a column-wise load to carry
        return None
    check_column_names(list(columns), "platformFile")
    return list(columns)


def _head(stream: IO[bytes]) -> bytes:
    """The first block's whole lines (a partial last line is left for the load to judge)."""
    head = stream.read(BLOCK)
    return head[:head.rfind(b"\n") + 1] if len(head) == BLOCK else head


Lines = Callable[[IO[bytes]], IO[bytes]]


def _array_lines(stream: IO[bytes]) -> IO[bytes]:
    """A JSON array as NDJSON (:mod:`.json_array_lines`), read in whole blocks as :func:`_head` wants."""
    return io.BufferedReader(ArrayLines(stream), BLOCK)


def _array_items(start: bytes) -> Lines:
    """A JSON array starting with ``start``, one item per line first as far as its layout allows
    (:func:`.json_layouts.items_per_line`), as NDJSON."""
    from connector_ops.etl.json_layouts import items_per_line  # numpy: kept out of every action's import

    return lambda stream: _array_lines(items_per_line(stream, start, BLOCK))


def _lines_of(start: bytes, encoding: str, lines_to_ignore: int) -> tuple[Lines, str]:
    """How the file starting with ``start`` becomes NDJSON in UTF-8, and the encoding its first block is then
    judged in. NDJSON in another encoding is read as UTF-8 (:func:`~connector_ops.kernel.streams.as_utf8`,
    the row reader's decoder), and so is a JSON array, as the row reader reads it, judged as plain ``utf-8``
    then (:class:`.json_array_lines.ArrayLines` drops a BOM before it). With lines to ignore, the file is
    NDJSON to the row reader even when it starts as an array; what follows them is judged as plain ``utf-8``
    (only the file's first character may be a BOM that ``utf-8-sig`` drops)."""
    judged = encoding if encoding in UTF8 else "utf-8"  # what as_utf8 makes of it
    head = None if lines_to_ignore else array_head(start, encoding)
    if head is not None:
        array = _array_items(head)
        return (lambda stream: array(as_utf8(stream, encoding)[0])), "utf-8"
    if not lines_to_ignore:
        return (lambda stream: as_utf8(stream, encoding)[0]), judged
    return (lambda stream: after_lines(as_utf8(stream, encoding)[0], lines_to_ignore)), "utf-8"


def _scalars_as_text(lines: Lines) -> Lines:
    """``lines`` with their numbers and booleans as text (:mod:`.json_scalars`), and the lines it cannot
    quote as the row reader stores them."""
    from connector_ops.etl.json_scalars import ScalarsAsText

    return lambda stream: io.BufferedReader(ScalarsAsText(lines(stream), stored_line), BLOCK)


def _quoted_head(head: bytes) -> tuple[bytes, int]:
    """The first block with its values as text (:mod:`.json_scalars`), and how many of its lines were
    written again by the row reader's conversion."""
    from connector_ops.etl.json_scalars import scalars_quoted  # numpy: kept out of every action's import

    rewritten = 0

    def counted(line: bytes) -> bytes:
        nonlocal rewritten
        rewritten += 1
        return stored_line(line)

    return scalars_quoted(head, counted), rewritten


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    row = dict(pairs)
    if len(row) != len(pairs):
        raise ValueError("a key twice in one object")
    return row


def push_ndjson_fast(store: VirtualFileStore, open_file: Open, name: str, size: int | None,
                     encoding: str, lines_to_ignore: int = 0, schema: list[str] | None = None, *,
                     text_size: int | None = None) -> tuple[str | None, bool]:
    """``(the new virtual file's id, False)``, or ``(None, gave_up)`` when the row reader must read the file
    (nothing is left); ``gave_up`` when a load began and stopped, so the row reader's pass is a second read.
    ``schema``'s columns come first, then the file's other keys in the order each first appears. ``size``
    is what progress counts; ``text_size``, the text's bytes when they are more (a compressed file), chooses
    the path."""
    if not FAST or not store.columnar_load_pays(size if text_size is None else text_size):
        return None, False
    began = False
    try:
        with open_file() as raw_probe:
            probe = peekable(raw_probe, LAYOUT_PEEK)
            start = probe.peek(LAYOUT_PEEK)
            lines, encoding = _lines_of(start, encoding, lines_to_ignore)
            head = _head(lines(probe))
        quoted, rewritten = _quoted_head(head)
        if 2 * rewritten > head.count(b"\n") + 1:  # 1M such lines: 13.5 s rewritten, 12.1-12.7 s by the row reader
            return None, False
        columns = columns_of(quoted, encoding)
        if columns is None:
            return None, False
        if schema is not None:
            columns = [*schema, *(c for c in columns if c not in schema)]
        quoting, widened = quoted != head, False  # numbers, booleans or nested values in the first block: quoted
        label = f"push {name}"
        while True:
            began = True
            try:
                read = _scalars_as_text(lines) if quoting else lines
                return _loaded(store, open_file, label, size, columns, read), False
            except Exception as exc:
                if not quoting and _TYPE_CHANGED.search(str(exc)):
                    log.debug("push %s: a value that is not a string after the first block; read again quoted", name)
                    quoting, label = True, f"push {name} (again: a value not text, seen late)"
                elif not widened and _NEW_KEY in str(exc):
                    log.debug("push %s: a key after the first block; every key found, then read again", name)
                    columns = every_key(open_file, _scalars_as_text(lines), columns, f"push {name} (listing keys)",
                                        size)
                    widened, label = True, f"push {name} (again: a key seen late)"
                else:
                    raise
    except UpstreamError:  # the file's server failed, not its bytes: reading it again would wait again
        raise
    except Exception as exc:  # whatever went wrong, the row reader reads the file and words the error
        log.debug("push %s: the columnar NDJSON path gave up (%s)", name, gave_up_because(exc))
        return None, began


def _loaded(store: VirtualFileStore, open_file: Open, label: str, size: int | None, columns: list[str],
            lines: Lines) -> str:
    with open_file() as raw, track(label, size, "B", then_again=True) as reporter:  # read again, or row by row
        return store.create_from_ndjson(columns, lines(reading_with_progress(raw, reporter)))


def every_key(open_file: Open, lines: Lines, first: list[str], label: str = "listing keys",
              size: int | None = None) -> list[str]:
    """``first`` and then every other key of the file, in the order each first appears (the row reader's
    order of columns): Arrow infers each block's keys, a block at a time (memory stays one block). The
    reading is reported as ``label`` (a whole pass over a file that may be large)."""
    import pyarrow.json as pj

    keys = dict.fromkeys(first)

    def add(block: bytes) -> None:
        if block.strip():
            options = pj.ReadOptions(use_threads=False, block_size=len(block) + 1)
            keys.update(dict.fromkeys(pj.read_json(io.BytesIO(block), read_options=options).schema.names))

    with open_file() as raw, track(label, size, "B") as reporter:
        stream = lines(reading_with_progress(raw, reporter))
        while block := stream.readlines(BLOCK):  # whole lines, about a block's worth
            add(b"".join(block))
    check_column_names(list(keys), "platformFile")
    return list(keys)
