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
from collections.abc import Generator, Sequence
from typing import IO, Any

from connector_ops.resources.virtual_files.paced import LEAVE, Paced

#: Arrow's block: the unit of parsing and of memory
BLOCK = 1 << 20
_LF, _CR, _OPEN, _CLOSE, _SPACE, _TAB = b"\n"[0], b"\r"[0], b"{"[0], b"}"[0], b" "[0], b"\t"[0]
#: spaces and tabs stepped past, a byte at a time, beside each line end before a chunk is judged without any
_PAD_STEPS = 4
_BOM = b"\xef\xbb\xbf"


class NotNDJSON(ValueError):
    """Arrow read the bytes, but not as the row reader reads them: not one object per line, or not UTF-8."""


class _LineAudit(io.RawIOBase):
    """Counts the lines holding anything but spaces and tabs (:attr:`lines`), and checks that each starts with
    ``{`` and ends with ``}`` (:attr:`objects`), a chunk at a time with numpy, however the reads cut them.

    A line ends at an LF or a CR, as the row reader's lines do (a CRLF is an empty line more, which counts
    for nothing). Arrow reads a lone CR as a space, so ``{"a":\r"1"}`` was one row to it and a broken line to
    the row reader; and counting alone let two faults make up for each other further on than the first block
    (an object over two lines, two objects on another). A line that is one object starts with ``{`` and ends
    with ``}``, and no object can go on past such a line end, since JSON never has ``{`` right after ``}``:
    so with every line so shaped, as many lines as rows means one object a line. A line of anything else
    (also other blanks the row reader skips: a form feed) leaves the file to the row reader."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._last = _LF  # the last byte read that is not a space or tab (a line end before the start)
        self._started = False  # past a BOM that starts the bytes (Arrow skips it, as utf-8-sig does)
        self.lines = 0
        self.objects = True  # every line so far starts with { and ends with } (or is blank)

    def readable(self) -> bool:
        return True

    # override: callers pass a bytearray or memoryview, which it slices (typeshed: any buffer)
    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        import numpy as np

        view = memoryview(buffer).cast("B")
        chunk = self._stream.read(len(view))
        if not chunk:
            self._audit(np.array([_LF], dtype=np.uint8))  # the last line ends with the bytes
            return 0
        view[:len(chunk)] = chunk
        audited = chunk if self._started else chunk.removeprefix(_BOM)  # (a BOM cut between reads: no object)
        self._started = True
        self._audit(np.frombuffer(audited, dtype=np.uint8))
        return len(chunk)

    def _audit(self, data: Any) -> None:
        import numpy as np

        ends = np.flatnonzero(data <= _CR)  # line ends, among the few bytes as low (tabs)
        ends = ends[(data[ends] == _LF) | (data[ends] == _CR)]
        found = _beside(data, ends)
        if found is None:  # long runs of spaces or tabs beside line ends: judged without them
            data = data[(data != _SPACE) & (data != _TAB)]
            ends = np.flatnonzero((data == _LF) | (data == _CR))
            found = _beside(data, ends)
        assert found is not None  # nothing left to step past
        left, right = found
        if right[-1] >= len(data):  # only spaces and tabs: nothing to judge, no line end
            return
        inside = len(data) - 1
        # each line end's byte before it (the chunk before's, for one starting it) and after it (the next
        # chunk's: checked there, as its first)
        before = np.where(left[:-1] >= 0, data[np.clip(left[:-1], 0, inside)], self._last)
        after = np.where(right[:-1] <= inside, data[np.clip(right[:-1], 0, inside)], _LF)
        content = (before != _LF) & (before != _CR)  # the line ending here holds something
        self.lines += int(np.count_nonzero(content))
        if self.objects:
            starts = np.flatnonzero((after != _LF) & (after != _CR))  # a line starting after this end
            self.objects = bool(np.all(before[content] == _CLOSE)) and bool(np.all(after[starts] == _OPEN)) \
                and (self._last not in (_LF, _CR) or data[right[-1]] in (_LF, _CR, _OPEN))
        self._last = int(data[left[-1]])


def _beside(data: Any, ends: Any) -> tuple[Any, Any] | None:
    """Where the bytes beside each line end of ``data`` are once spaces and tabs are stepped past: ``left``,
    the one before each end, then the chunk's last (``-1``: none in the chunk); ``right``, the one after each
    end, then the chunk's first (``len(data)``: none). ``None`` when a run of them is longer than
    :data:`_PAD_STEPS`: the caller then filters them out of the whole chunk, which took a JSON array laid out
    one object per line (a comma or a bracket made a space beside each line end) 10–20 % longer to push."""
    import numpy as np

    left = _stepped(data, np.append(ends - 1, len(data) - 1), -1)
    right = _stepped(data, np.append(ends + 1, 0), 1)
    return None if left is None or right is None else (left, right)


def _stepped(data: Any, positions: Any, step: int) -> Any | None:
    """``positions`` (of ``data``, or just past either end) each moved by ``step`` until it is on a byte that
    is not a space or a tab, or off ``data``; ``None`` if one is still on one after :data:`_PAD_STEPS`."""
    import numpy as np

    for _ in range(_PAD_STEPS + 1):
        on = np.flatnonzero((positions >= 0) & (positions < len(data)))
        held = data[positions[on]]
        blank = on[(held == _SPACE) | (held == _TAB)]
        if not len(blank):
            return positions
        positions[blank] += step
    return None


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
    if rows != audit.lines or not audit.objects:
        raise NotNDJSON(f"{rows} objects on {audit.lines} lines" if audit.objects else "a line that is not one object")
