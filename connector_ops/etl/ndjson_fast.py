"""Push of NDJSON on a columnar path: Arrow's C JSON reader when every value is a string or null.

The row reader (:func:`.readers.read_json`) calls ``json.loads`` once per line and keeps a number's exact
text (``1.50`` stays ``"1.50"``), which Arrow cannot: it reads numbers as doubles. But most NDJSON that
people load into rows is all strings — exports of our own Pull, of databases, of logs — and for that
Arrow reads exactly what the row reader reads, several times faster. So Arrow is asked first, and the file
goes to the row reader (nothing written) whenever Arrow's reading could differ from it:

* a column whose type is not string or null (a number, a boolean, an object, an array): Arrow decides
  that from the first block, and a later block that disagrees fails the read;
* a key twice in one object, a lone surrogate, bytes that are not UTF-8, a line that is not an object,
  an empty file: Arrow fails too;
* Arrow accepts an object spread over several lines and several objects on one line, which NDJSON (and the
  row reader) refuses: the bytes are audited as Arrow reads them, and the number of non-blank lines must
  equal the number of rows;
* a BOM under an explicit ``utf-8`` (the row reader refuses it; Arrow skips it), ``linesToIgnore``, a
  ``schema``: not tried.

Errors are never worded here: the row reader reads the file again and says exactly what and where.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import IO, TYPE_CHECKING, Any

from connector_ops.kernel.limits import check_column_names
from connector_ops.kernel.progress import reading_with_progress, track

if TYPE_CHECKING:
    from connector_ops.resources.virtual_files.store import VirtualFileStore

log = logging.getLogger(__name__)

#: tests switch the fast path off to run every case through the row reader
FAST = True

Open = Callable[[], AbstractContextManager[IO[bytes]]]

BLOCK = 1 << 20
_BLANK = re.compile(rb"\n[ \t\r]*(?=\n)")
_BOM = b"\xef\xbb\xbf"


class _LineAudit(io.RawIOBase):
    """Counts the non-blank lines of the bytes read through it, whole lines at a time."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._partial = b""
        self.lines = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        n = self._stream.readinto(buffer)  # type: ignore[attr-defined]
        if not n:
            if self._partial.strip():
                self.lines += 1
            self._partial = b""
            return 0
        data = self._partial + bytes(buffer[:n])
        cut = data.rfind(b"\n") + 1
        whole, self._partial = data[:cut], data[cut:]
        if whole:  # every whole line ends with \n; a blank one is \n, spaces, \n (the start counts as \n)
            self.lines += whole.count(b"\n") - len(_BLANK.findall(b"\n" + whole))
        return n


def columns_of(stream: IO[bytes], encoding: str) -> list[str] | None:
    """The column names if Arrow may read this NDJSON (from its first block), else ``None``."""
    import pyarrow as pa
    import pyarrow.json as pj

    if encoding.lower().replace("_", "-") not in ("utf-8-sig", "utf-8", "utf8"):
        return None
    buffered = stream if hasattr(stream, "peek") else io.BufferedReader(stream)  # type: ignore[arg-type]
    head = buffered.peek(64)
    if head.startswith(_BOM) and encoding.lower().replace("_", "-") != "utf-8-sig":
        return None
    if not head.lstrip(_BOM + b" \t\r\n").startswith(b"{"):
        return None  # an empty file or a JSON array: the row reader's
    schema = pj.open_json(buffered, read_options=pj.ReadOptions(block_size=BLOCK)).schema
    # JSON strings are inferred as string, or as timestamp when they look like dates; null when only null
    if not all(pa.types.is_string(t) or pa.types.is_null(t) or pa.types.is_timestamp(t) for t in schema.types):
        return None  # a number, boolean, object or array: its text needs the row reader
    columns = list(schema.names)
    if not columns:  # rows of empty objects: nothing for a column-wise load to carry
        return None
    check_column_names(columns, "platformFile")
    return columns


def string_batches(stream: IO[bytes], columns: list[str]) -> tuple[Iterator[Any], _LineAudit]:
    """Record batches of ``columns``, every one read as text (no date inference); any other key, or a
    value that is not a string or null, fails the read."""
    import pyarrow as pa
    import pyarrow.json as pj

    audit = _LineAudit(stream)
    parse = pj.ParseOptions(explicit_schema=pa.schema([(c, pa.string()) for c in columns]),
                            unexpected_field_behavior="error")
    reader = pj.open_json(io.BufferedReader(audit, BLOCK), read_options=pj.ReadOptions(block_size=BLOCK),
                          parse_options=parse)
    return iter(reader), audit


class RowCount:
    """Passes record batches through, counting their rows."""

    def __init__(self, batches: Iterator[Any]) -> None:
        self._batches = batches
        self.rows = 0

    def __iter__(self) -> Iterator[Any]:
        for batch in self._batches:
            self.rows += batch.num_rows
            yield batch


def push_ndjson_fast(store: VirtualFileStore, open_file: Open, name: str, size: int | None,
                     encoding: str) -> str | None:
    """The new virtual file's id, or ``None`` when the row reader must read the file (nothing is left)."""
    if not FAST or not store.columnar_load_pays(size):
        return None
    try:
        with open_file() as probe:
            columns = columns_of(probe, encoding)
        if columns is None:
            return None
        with open_file() as raw, track(f"push {name}", size, "B") as reporter:
            batches, audit = string_batches(reading_with_progress(raw, reporter), columns)
            counted = RowCount(batches)
            vf_id = store.create_from_arrow(columns, counted, size)
    except Exception as exc:  # whatever went wrong, the row reader reads the file and words the error
        log.debug("push %s: the columnar NDJSON path gave up (%s: %s)", name, type(exc).__name__, exc)
        return None
    if counted.rows != audit.lines:  # an object over several lines, or several on one: not NDJSON
        store.drop(vf_id)
        return None
    return vf_id
