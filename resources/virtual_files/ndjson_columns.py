"""NDJSON rows as Arrow record batches of strings: Arrow's C JSON reader, with an audit that the file is
NDJSON (one object per line).

The caller (``connector_ops.etl.ndjson_fast``) has already decided from the first block that every value
is a string or null; here the file is read with an explicit all-string schema, so a later value of
another type, or another key, fails the read. Arrow also accepts an object spread over several lines and
several objects on one line, which NDJSON (and the row reader) refuses: the bytes are audited as Arrow
reads them, and once the last batch is out the number of non-blank lines must equal the number of rows,
else :class:`NotNDJSON` is raised — before the load commits, so nothing is left. Arrow's JSON reader does not
check that strings are UTF-8 either (the caller decodes only the first block): each batch is validated, so
a byte that is not UTF-8 further on raises :class:`NotNDJSON` too, where it was stored as it was (on SQLite,
a virtual file no Pull or Iterate could read: 500 "Could not decode to UTF-8"). Validating costs about 1 ms
a MiB.

Memory: Arrow's reader reads at most a few blocks ahead of the batches taken (:mod:`.paced`). Left to its
thread pool, it parses blocks ahead of a slow consumer; only the SQLite loader process lets it
(:mod:`.sqlite_ingest`, which also reads batches ahead of the inserts in a thread); on PostgreSQL it parses
alone while the server's ``COPY`` stores the previous batches.
"""

from __future__ import annotations

import io
import re
from collections.abc import Generator, Sequence
from typing import IO, Any

from connector_ops.resources.virtual_files.paced import LEAVE, Paced

#: Arrow's block: the unit of parsing and of memory
BLOCK = 1 << 20
_BLANK = re.compile(rb"\n[ \t\r]*(?=\n)")  # a blank line, from the newline before it
_BLANK_START = re.compile(rb"\n[\n \t\r]")  # where one may start (one pass, unlike four finds)
_NOT_BLANK = re.compile(rb"[^ \t\r\n]")


class NotNDJSON(ValueError):
    """Arrow read the bytes, but not as the row reader reads them: not one object per line, or not UTF-8."""


class _LineAudit(io.RawIOBase):
    """Counts the non-blank lines of the bytes read through it, a chunk at a time without copying lines:
    newlines are counted in C, and the blank lines (only spaces, tabs and CRs) looked for only in a chunk
    that has a newline followed by one of those."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._blank_tail = True  # the line read so far (after the last newline) is blank
        self.lines = 0

    def readable(self) -> bool:
        return True

    # override: callers pass a bytearray or memoryview, which it slices (typeshed: any buffer)
    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        chunk = self._stream.read(len(view))
        if not chunk:
            self.lines += not self._blank_tail
            self._blank_tail = True
            return 0
        view[:len(chunk)] = chunk
        first = chunk.find(b"\n")
        if first < 0:
            self._blank_tail = self._blank_tail and not _NOT_BLANK.search(chunk)
            return len(chunk)
        last = chunk.rfind(b"\n")
        blank = int(self._blank_tail and not _NOT_BLANK.search(chunk, 0, first))  # the line ending at first
        if _BLANK_START.search(chunk, first, last + 1):
            blank += len(_BLANK.findall(chunk, first, last + 1))
        self.lines += chunk.count(b"\n") - blank
        self._blank_tail = not _NOT_BLANK.search(chunk, last + 1)
        return len(chunk)


def _utf8(batch: Any) -> Any:
    """``batch``, once its strings are proven UTF-8 (Arrow's full validation, in C)."""
    import pyarrow as pa

    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise NotNDJSON(f"a value that is not UTF-8 ({exc})") from None
    return batch


def ndjson_batches(stream: IO[bytes], columns: Sequence[str], block: int = BLOCK, *,
                   threads: bool = False) -> Generator[Any, None, None]:
    """Record batches of ``columns`` (in that order), every value read as text (no date inference); any
    other key, a value that is not a string or null, or bytes that are not one object per line, raise.
    ``threads``: Arrow's thread pool parses blocks ahead (the SQLite loader process, where the parse is the
    longer half of the work; its pool and arenas cost ≈ 60 MiB, so the store's own process parses alone)."""
    import pyarrow as pa
    import pyarrow.json as pj

    audit = _LineAudit(stream)
    paced = Paced(audit, block)
    parse = pj.ParseOptions(explicit_schema=pa.schema([(c, pa.string()) for c in columns]),
                            unexpected_field_behavior="error")
    rows = 0
    try:
        reader = pj.open_json(paced.entrance(paced.buffered()),
                              read_options=pj.ReadOptions(block_size=block, use_threads=threads),
                              parse_options=parse)
        for batch in paced.taken(reader):
            rows += batch.num_rows
            yield _utf8(batch)
    finally:  # however the batches end, Arrow's reading thread has left the stream (:meth:`.Paced.stop`)
        paced.stop(LEAVE)
    if rows != audit.lines:
        raise NotNDJSON(f"{rows} objects on {audit.lines} lines")
